"""The U2-Bench evaluation kit's classification and measurement prompts, verbatim.

Copied from dolphin-sound/u2-bench-evalkit (Apache-2.0, commit 4ab2465), `vlmeval/dataset/cla_prompt.json` and
`vlmeval/dataset/mea_prompt.json`, which `ClaDataset.build_prompt` and `MeasureDataset.build_prompt` read by dataset
id and send unchanged (the measurement prompt of dataset 31 keeps its unfilled ``{pixelSizeMm}``, as the kit sends
it). Kept as Python literals so the package needs no data-file entry; `tests/test_u2bench_runner.py` checks them
against a sha256 of the kit's JSON files. Do not edit by hand.
"""

from __future__ import annotations

CLA_PROMPTS: dict[str, str] = {
    '10': (
        'You are a radiologist analyzing a fetal ultrasound image.\n'
        'Your task is to determine the fetal presentation and orientation based on the provided ultrasound '
        'image. Specifically, identify whether the fetal head is down(hd) or up(hu). Additionally, determine '
        'if the fetal back is primarily oriented towards the ultrasound probe  (vb) or towards the '
        'ultrasound probe (vf). Choose the single best option from the options below that accurately '
        'combines these findings.\n'
        "options: 'hdvb', 'hdvf', 'huvb', 'huvf'\n"
        'Output format: only the exact text of the chosen option from the list above. Do not include any '
        'introductory phrases, explanations, numbering, or formatting.'
    ),
    '18': (
        'You are a radiologist or cardiologist specializing in echocardiography, analyzing an apical view '
        'ultrasound image of the human heart.\n'
        'Your task is to accurately identify the specific apical view presented in the provided '
        'echocardiogram image. Carefully examine the cardiac structures visible. Determine if the image '
        'displays primarily the left ventricle and left atrium only (indicative of a 2-Chamber view, 2CH), '
        'or if it clearly shows all four chambers: the left ventricle, right ventricle, left atrium, and '
        'right atrium (indicative of a 4-Chamber view, 4CH). Choose the single best option from the list '
        'below that correctly identifies the view.\n'
        'options: 2CH, 4CH\n'
        'Output format: only the exact text of the chosen option from the list above. Do not include any '
        'introductory phrases, explanations, numbering, or formatting.'
    ),
    '21': (
        'You are a radiologist analyzing a breast ultrasound image.\n'
        'Your task is carefully examine the provided breast ultrasound image, evaluate any identified '
        'lesions or abnormalities based on key sonographic characteristics (including shape, orientation, '
        'margin, echo pattern, posterior acoustic features, and associated features), synthesize these '
        'features to form an overall impression about the likelihood of malignancy, and then choose the '
        'single best option from the following list that accurately summarizes this assessment.\n'
        'options: benign, malignant\n'
        'Output format: only the exact text of the chosen option from the list above. Do not include any '
        'introductory phrases, explanations, numbering, or formatting.'
    ),
    '23': (
        'You are a radiologist analyzing a breast ultrasound image.\n'
        'Your task is carefully examine the provided breast ultrasound image, evaluate any identified '
        'lesions or abnormalities based on key sonographic characteristics (including shape, orientation, '
        'margin, echo pattern, posterior acoustic features, and associated features), synthesize these '
        'features to form an overall impression about the likelihood of malignancy, and then choose the '
        'single best option from the following list that accurately summarizes this assessment.\n'
        'options: normal, benign, malignant\n'
        'Output format: only the exact text of the chosen option from the list above. Do not include any '
        'introductory phrases, explanations, numbering, or formatting.'
    ),
    '28': (
        'You are a radiologist analyzing an ultrasound image of left/right knee.\n'
        'Your task is to assess the severity of osteoarthritis (OA) using the established Kellgren-Lawrence '
        '(KL) grading system.\n'
        'Kellgren-Lawrence (KL) Grade Mapping to Options:\n'
        "- 'No OA': Corresponds to KL Grade 0 (No radiographic features of OA).\n"
        "- 'Questionable OA': Corresponds to KL Grade 1 (Doubtful JSN and possible minute osteophytes).\n"
        "- 'Mild OA': Corresponds to KL Grade 2 (Definite osteophytes and possible JSN).\n"
        "- 'Moderate OA': Corresponds to KL Grade 3 (Moderate multiple osteophytes, definite JSN, some "
        'sclerosis, possible deformity).\n'
        "- 'Severe OA': Corresponds to KL Grade 4 (Large osteophytes, marked JSN, severe sclerosis, definite "
        'deformity).\n'
        "- 'Total joint replacement': Indicates the presence of knee arthroplasty components (prosthesis), "
        'which replaces the native joint structures evaluated by the KL scale.\n'
        'Choose the single best option from the following list that accurately describes the image.\n'
        "options: 'Mild OA', 'Moderate OA', 'No OA', 'Questionable OA', 'Severe OA', 'Total joint "
        "replacement'\n"
        'Output format: only the exact text of the chosen option from the list above. Do not include any '
        'introductory phrases, explanations, numbering, or formatting.'
    ),
    '32': (
        'You are a radiologist specializing in head and neck or endocrine imaging, analyzing an ultrasound '
        'image of the thyroid gland.\n'
        'Your task is to carefully examine the provided thyroid ultrasound image, evaluate the overall '
        'thyroid gland parenchyma (echogenicity, texture, vascularity), identify any focal nodules, assess '
        'the specific sonographic features of any nodules found (including composition, echogenicity, shape, '
        'margin, and echogenic foci), synthesize these findings to determine if the gland appears normal, '
        'contains benign-appearing findings, or contains findings suspicious for malignancy, and then choose '
        'the single best option from the following list that accurately summarizes this assessment.\n'
        'options: benign, malignant\n'
        'Output format: only the exact text of the chosen option from the list above. Do not include any '
        'introductory phrases, explanations, numbering, or formatting.'
    ),
    '40': (
        'You are a radiologist analyzing a breast ultrasound image.\n'
        'Your task is to synthesize the sonographic characteristics of any identified lesions (or lack '
        'thereof) into a final ACR BI-RADS (Breast Imaging Reporting and Data System) assessment category. \n'
        'BI-RADS Ultrasound Assessment Category Definitions:\n'
        "- '2' (Benign): Findings are definitively benign (e.g., simple cysts, intramammary lymph nodes, "
        'stable surgical implants/changes). 0% likelihood of malignancy. Requires routine screening '
        'follow-up.\n'
        "- '3' (Probably Benign): Findings have characteristic benign features but are not definitively "
        'benign (e.g., presumed fibroadenoma, complicated cyst). Very low likelihood of malignancy (<2%). '
        'Short-interval (e.g., 6-month) follow-up is typically recommended.\n'
        "- '4A' (Low Suspicion for Malignancy): Findings warrant biopsy but have a low probability of "
        'malignancy (>2% to ≤10%).\n'
        "- '4B' (Moderate Suspicion for Malignancy): Findings warrant biopsy with an intermediate "
        'probability of malignancy (>10% to ≤50%).\n'
        "- '4C' (High Suspicion for Malignancy): Findings warrant biopsy with a high probability of "
        'malignancy (>50% to <95%), without the classic features of Category 5.\n'
        "- '5' (Highly Suggestive of Malignancy): Findings have classic malignant features (e.g., irregular "
        'spiculated mass). Very high probability of malignancy (≥95%). Biopsy is required, and definitive '
        'action should be taken regardless of pathology results if discordant.\n'
        ' Choose the single most appropriate BI-RADS assessment category from the options below.\n'
        "options:  ['2', '3', '4A', '4B', '4C', '5']\n"
        'Output format: only the exact text of the chosen option from the list above. Do not include any '
        'introductory phrases, explanations, numbering, or formatting.'
    ),
    '50': (
        'You are a radiologist analyzing an ultrasound image of fetal abdomen.\n'
        'Your task is to determine if the presented cross-sectional view of the fetal abdomen is technically '
        'adequate for performing an accurate Abdominal Circumference (AC) measurement according to standard '
        'obstetric guidelines. Identify the specific anatomical plane shown for the fetal abdomen. Determine '
        'if this plane meets the criteria for an optimal AC measurement (correct landmarks visible, proper '
        'transverse orientation) or if it is suboptimal (incorrect plane, missing landmarks, '
        'oblique/foreshortened view, presence of interfering structures like kidneys). Choose the single '
        "best option describing the plane's suitability for AC measurement.\n"
        "options: 'none', 'optimal', 'suboptimal'\n"
        'Output format: only the exact text of the chosen option from the list above. Do not include any '
        'introductory phrases, explanations, numbering, or formatting.'
    ),
    '66': (
        'You are a radiologist analyzing a breast ultrasound image.\n'
        'Your task is carefully examine the provided breast ultrasound image, evaluate any identified '
        'lesions or abnormalities based on key sonographic characteristics (including shape, orientation, '
        'margin, echo pattern, posterior acoustic features, and associated features), synthesize these '
        'features to form an overall impression about the likelihood of malignancy, and then choose the '
        'single best option from the following list that accurately summarizes this assessment.\n'
        'options: benign, malignant\n'
        'Output format: only the exact text of the chosen option from the list above. Do not include any '
        'introductory phrases, explanations, numbering, or formatting.'
    ),
    '70': (
        'You are a radiologist specializing in head and neck or endocrine imaging, analyzing an ultrasound '
        'image of the thyroid gland.\n'
        'Your task is to carefully examine the provided thyroid ultrasound image, evaluate the overall '
        'thyroid gland parenchyma (echogenicity, texture, vascularity), identify any focal nodules, assess '
        'the specific sonographic features of any nodules found (including composition, echogenicity, shape, '
        'margin, and echogenic foci), synthesize these findings to determine if the gland appears normal, '
        'contains benign-appearing findings, or contains findings suspicious for malignancy, and then choose '
        'the single best option from the following list that accurately summarizes this assessment.\n'
        'options: normal thyroid, benign, malignant\n'
        'Output format: only the exact text of the chosen option from the list above. Do not include any '
        'introductory phrases, explanations, numbering, or formatting.'
    ),
    '25': (
        'You are a radiologist analyzing an ultrasound image of skin.\n'
        'Your task is to carefully examine the provided skin ultrasound image, evaluate the identified '
        'lesion or abnormality based on key sonographic characteristics (including its location within skin '
        'layers, echogenicity, internal echo texture, shape, margins, size/depth, posterior acoustic '
        'phenomena, and vascularity assessed with Doppler), synthesize these features to form an overall '
        'impression regarding the likelihood of malignancy, and then choose the single best option from the '
        'following list that summarizes this assessment.\n'
        'options: benign, malignant\n'
        'Output format: only the exact text of the chosen option from the list above. Do not include any '
        'introductory phrases, explanations, numbering, or formatting.'
    ),
    '42': (
        'You are a radiologist analyzing an ultrasound image of the pancreas.\n'
        'Your task is to carefully examine the provided ultrasound image of the pancreas, evaluate the '
        "gland's echotexture, size, margins, and the pancreatic duct diameter, identify any focal lesions or "
        'masses (noting their echogenicity, margins, size, and vascularity if Doppler is available), assess '
        'for associated findings such as ductal dilation (including potential "double duct" sign), vascular '
        'involvement (encasement/thrombosis), regional lymphadenopathy, or fluid collections, synthesize '
        'these findings to determine if there is evidence suspicious for primary pancreatic cancer versus '
        'other findings, and then choose the single best option from the following list that summarizes this '
        'assessment.\n'
        'options: non-pancreas cancer, pancreas cancer\n'
        'Output format: only the exact text of the chosen option from the list above. Do not include any '
        'introductory phrases, explanations, numbering, or formatting.'
    ),
    '74is_normal': (
        'You are a radiologist analyzing an ultrasound image obtained during a pelvic examination, '
        'potentially as part of an evaluation for Polycystic Ovary Syndrome (PCOS).\n'
        'Your task is to evaluate the overall appearance of the anatomical structures presented in the '
        'ultrasound image (primarily focusing on the ovaries and potentially the uterus). Consider '
        'sonographic features such as ovarian size, morphology, follicle count and distribution, stromal '
        'echogenicity, as well as any other findings that might indicate pathology. Based on this '
        'assessment, determine if the image appears generally normal or if it displays features suggestive '
        'of an abnormality (which could include findings consistent with PCOS or other conditions). Choose '
        'the single best option from the following list that accurately describes this overall impression.\n'
        "options: 'Appears abnormal', 'Appears normal'\n"
        'Output format: only the exact text of the chosen option from the list above. Do not include any '
        'introductory phrases, explanations, numbering, or formatting.'
    ),
    '74is_visible': (
        'You are a radiologist analyzing an ultrasound image obtained during a pelvic examination. '
        'Crucially, assume this specific image has already been determined to show some form of abnormality. '
        'Your focus now is on the nature of that abnormality.\n'
        'Your task is to specifically assess whether the abnormality present in this ultrasound image '
        'includes clear sonographic evidence consistent with a polycystic ovary. Evaluate the visualized '
        'ovarian structures, paying close attention to features commonly associated with PCOS, such as: '
        'increased number of follicles, peripheral distribution of follicles, increased ovarian volume, '
        'increased stromal echogenicity or volume. Based on whether these specific PCOS-related sonographic '
        'features are identifiable within the overall abnormal appearance, specifies whether the ultrasound '
        'image shows evidence/ visibility of a polycystic ovary or not. Choose the single best option from '
        'the following list.\n'
        "options: 'Not-visible', 'Visible'\n"
        'Output format: only the exact text of the chosen option from the list above. Do not include any '
        'introductory phrases, explanations, numbering, or formatting.'
    ),
    '75': (
        'You are a radiologist analyzing an ultrasound image obtained during a pelvic examination, '
        'specifically being evaluated for features potentially related to Polycystic Ovary Syndrome (PCOS).\n'
        'Your task is to carefully evaluate the provided ultrasound image for sonographic features '
        'consistent with Polycystic Ovarian Morphology (PCOM), which is the ultrasound component relevant to '
        'PCOS detection. Analyze the visualized ovary (or ovaries), considering criteria such as increased '
        'ovarian volume, increased antral follicle count (e.g., ≥20 per ovary), peripheral follicle '
        'distribution, and/or increased stromal echogenicity/volume. If sonographic features consistent with '
        "PCOM are present, select the label `infected`, otherwise 'noninfected'.\n"
        'Choose the single best option from the following list.\n'
        "options: 'infected', 'noninfected'\n"
        'Output format: only the exact text of the chosen option from the list above. Do not include any '
        'introductory phrases, explanations, numbering, or formatting.'
    ),
    '44': (
        'You are a radiologist or clinician skilled in performing and interpreting Lung Ultrasound (LUS), '
        'specifically analyzing an ultrasound image of the lung pleura and parenchyma.\n'
        'Your task is to carefully examine the provided lung ultrasound image, focusing on the appearance of '
        'the pleural line and the underlying lung parenchyma, identify the presence and characteristics of '
        'A-lines, B-lines (number, coalescence), and any consolidations according to the defined severity '
        'scoring criteria below, and then choose the single best integer score (0, 1, 2, or 3) from the '
        'following list that accurately reflects the observed findings.\n'
        'LUS Severity Score Criteria:\n'
        '*   0: Normal lung pattern. Characterized by a continuous, regular, thin pleural line with '
        'horizontal reverberation artifacts (A-lines) below it. Sliding lung sign is typically present.\n'
        '*   1: Mild interstitial syndrome. Characterized by an indented or slightly irregular pleural line. '
        'Scattered, well-defined vertical artifacts (B-lines) are visible (typically ≥3 B-lines per '
        'intercostal space but not coalescent).\n'
        '*   2: Moderate interstitial syndrome or early consolidation. Characterized by a broken or '
        'significantly irregular pleural line. Multiple coalescent B-lines (small "white lung" areas) or '
        'small subpleural consolidations are present.\n'
        '*   3: Severe interstitial syndrome or large consolidation. Characterized by dense and largely '
        'extended confluent B-lines ("white lung" appearance occupying most or all of the screen) with or '
        'without large consolidations.\n'
        'options: 0, 1, 2, 3 \n'
        'Output format: only the single chosen integer number from the list above. Do not include any '
        'introductory phrases, explanations, numbering, or formatting.'
    ),
    '57': (
        'You are a radiologist analyzing a static B-mode ultrasound image displaying the liver.\n'
        'Your task is to evaluate the liver parenchyma in the provided image to determine the grade of '
        'hepatic steatosis. For this task, label 1 is assigned if the image displays features consistent '
        'with fatty liver (which often correlates histologically with >5% hepatocyte steatosis), while label '
        '0 is assigned if such features are absent. Based on your comprehensive assessment of these '
        'sonographic features, determine whether the image displays sufficient evidence to be classified as '
        'showing fatty liver (Label 1) or not (Label 0). Choose the single best option from the following '
        'list that accurately reflects your classification.\n'
        'options: 0, 1\n'
        'Output format: only the single chosen integer number from the list above. Do not include any '
        'introductory phrases, explanations, numbering, or formatting.'
    ),
    '37': (
        'You are a radiologist with expertise in interpreting neck and thyroid ultrasound images. You are '
        'presented with a single B-mode ultrasound image focused on the thyroid gland and adjacent neck '
        'structures.\n'
        'Your task is to identify the Cardinal Anatomical Plane depicted in the provided ultrasound image. '
        'Choose the single best option from the following list that accurately describes the image.\n'
        "options: 'Axial/Transverse Plane', 'Coronal Plane', 'Sagittal Plane'\n"
        "'Output format: only the exact text of the chosen option from the list above. Do not include any "
        'introductory phrases, explanations, numbering, or formatting.'
    ),
    '53': (
        'You are a radiologist analyzing a single B-mode ultrasound image obtained during a fetal '
        'assessment.\n'
        'Your task is to carefully examine the provided ultrasound image frame to identify the presence or '
        'absence of two specific anatomical landmarks: the fetal head and the maternal symphysis pubis. '
        "Based on this identification, classify the frame's content by choosing the single best option from "
        'the following list that accurately describes which of these landmarks are visible.\n'
        "Choose the single best option from the following list that accurately describes the frame\\'s "
        'content:\n'
        '\n'
        "options: 'None', 'OnlyFetalHead', 'OnlySymphysisPubis', 'SymphysisPubis+FetalHead'\n"
        'Output prompt: only the exact text of the chosen option from the list above. Do not include any '
        'introductory phrases, explanations, numbering, or other formatting.'
    ),
    '69': (
        'You are a radiologist analyzing an ultrasound image depicting a portion of the carotid arterial '
        'system in the neck.\n'
        'Your task is to carefully examine the provided ultrasound image, analyzing anatomical landmarks, '
        'vessel morphology, and its position relative to other neck structures, to identify the primary '
        'carotid artery segment shown. Choose the single best option from the following list that accurately '
        "describes the main vessel visualized in the frame's content. Assume 'left carotid' and 'right "
        "carotid' refer generally to the common or internal carotid artery on that respective side, while "
        "'external carotid' refers specifically to the external carotid artery branch.\n"
        'Choose the single best option from the following list that accurately describes the image.\n'
        "options: 'external carotid', 'left carotid', 'right carotid'\n"
        'Output prompt: only the exact text of the chosen option from the list above. Do not include any '
        'introductory phrases, explanations, numbering, or other formatting.'
    ),
    'anatomy': (
        'You are an expert specialized in analyzing medical ultrasound images. You are provided with a '
        'single ultrasound image frame, which could depict various parts of the human body.\n'
        'Your task is to analyze the provided ultrasound image and identify the primary anatomical region or '
        'organ system being visualized. Choose the single best option from the following list that most '
        'accurately represents this primary anatomical subject.\n'
        "options: 'fetal', 'thyroid', 'heart', 'lung', 'liver', 'carotid', 'kidney', 'prostate', 'breast', "
        "'other'\n"
        'Output prompt: only the exact text of the chosen option from the list above. Do not include any '
        'introductory phrases, explanations, numbering, or other formatting.'
    ),
    '28_class': (
        'You are a radiologist analyzing an ultrasound image of knee.\n'
        'Your task is to classify the specific anatomical view, laterality (left/right), orientation, and '
        'any specific imaging technique or patient positioning shown in the image:\n'
        "- 'left anterior suprapatellar longitudinal': Image of the left knee, taken from the front "
        '(anterior), just above the kneecap (suprapatellar), with the ultrasound probe oriented along the '
        'long axis of the thigh/patellar tendon. Standard B-mode imaging.\n'
        "- 'left anterior suprapatellar longitudinal with power Doppler': Same view as above (left, anterior "
        'suprapatellar, longitudinal), but with Power Doppler mode activated, typically used to assess blood '
        'flow or inflammation.\n'
        "- 'left anterior suprapatellar transverse in 30 degrees flexion': Image of the left knee, from the "
        'front (anterior), above the kneecap (suprapatellar), with the probe oriented across (transverse) '
        'the thigh, and the knee bent at approximately 30 degrees.\n'
        "- 'left anterior suprapatellar transverse in maximal flexion': Same view as above (left, anterior "
        'suprapatellar, transverse), but with the knee bent as much as possible (maximal flexion).\n'
        "- 'left lateral longitudinal': Image of the outer side (lateral) of the left knee, with the probe "
        'oriented along the long axis of the structures (e.g., LCL, IT band).\n'
        "- 'left medial longitudinal': Image of the inner side (medial) of the left knee, with the probe "
        'oriented along the long axis of the structures (e.g., MCL, medial meniscus).\n'
        "- 'left posterior medial transverse': Image of the back, inner corner (posterior medial) of the "
        "left knee, with the probe oriented across (transverse) the structures (often used for Baker's "
        'cysts).\n'
        "- 'right anterior suprapatellar longitudinal': Image of the right knee, taken from the front "
        '(anterior), just above the kneecap (suprapatellar), with the ultrasound probe oriented along the '
        'long axis of the thigh/patellar tendon. Standard B-mode imaging.\n'
        "- 'right anterior suprapatellar longitudinal with power Doppler': Same view as above (right, "
        'anterior suprapatellar, longitudinal), but with Power Doppler mode activated.\n'
        "- 'right anterior suprapatellar transverse in 30 degrees flexion': Image of the right knee, from "
        'the front (anterior), above the kneecap (suprapatellar), with the probe oriented across '
        '(transverse) the thigh, and the knee bent at approximately 30 degrees.\n'
        "- 'right anterior suprapatellar transverse in maximal flexion': Same view as above (right, anterior "
        'suprapatellar, transverse), but with the knee bent as much as possible (maximal flexion).\n'
        "- 'right lateral longitudinal': Image of the outer side (lateral) of the right knee, with the probe "
        'oriented along the long axis of the structures.\n'
        "- 'right medial longitudinal': Image of the inner side (medial) of the right knee, with the probe "
        'oriented along the long axis of the structures.\n'
        "- 'right posterior medial transverse': Image of the back, inner corner (posterior medial) of the "
        'right knee, with the probe oriented across (transverse) the structures.\n'
        'Choose the single best option from the following list that accurately describes the image.\n'
        "Options: 'left anterior suprapatellar longitudinal', 'left anterior suprapatellar longitudinal with "
        "power Doppler', 'left anterior suprapatellar transverse in 30 degrees flexion', 'left anterior "
        "suprapatellar transverse in maximal flexion', 'left lateral longitudinal', 'left medial "
        "longitudinal', 'left posterior medial transverse', 'right anterior suprapatellar longitudinal', "
        "'right anterior suprapatellar longitudinal with power Doppler', 'right anterior suprapatellar "
        "transverse in 30 degrees flexion', 'right anterior suprapatellar transverse in maximal flexion', "
        "'right lateral longitudinal', 'right medial longitudinal', 'right posterior medial transverse'\n"
        'Output prompt: only the exact text of the chosen option from the list above. Do not include any '
        'introductory phrases, explanations, numbering, or other formatting.'
    ),
    '03': (
        'You are a radiologist analyzing a single ultrasound image acquired during a fetal examination.\n'
        'Your task is to carefully examine the provided image, identify the primary anatomical structure or '
        'region being visualized, and determine the most appropriate description based on the standard '
        'imaging planes used in fetal ultrasound. Choose the single best option from the following list that '
        'accurately describes the main subject shown in the image.\n'
        "options: 'fetal abdomen','fetal femur',fetal brain', 'fetal thorax', 'maternal cervix', 'other'\n"
        'Output format: only the exact text of the chosen option from the list above. Do not include any '
        'introductory phrases, explanations, numbering, or formatting.'
    ),
}

MEA_PROMPTS: dict[str, str] = {
    '18': (
        'You are a radiologist analyzing a cardiac ultrasound image (echocardiogram).\n'
        'Your task is to estimate the Ejection Fraction (EF) based purely on a visual assessment '
        "('eyeballing') of the ventricular size and perceived contractility depicted in this image. EF "
        'represents the fraction of blood ejected from the left ventricle per heartbeat. Provide your best '
        'numerical estimate based only on the visual impression, recognizing this is an approximation '
        'compared to quantitative methods.\n'
        'For the purpose of this task, express your estimate as a floating-point number between 10.0 '
        '(indicating severely reduced ejection) and 75.0 (indicating hyperdynamic function).\n'
        'Output format: only the single numerical EF value as a floating-point number. Do not include units '
        "(like 'mm') or any other explanatory text."
    ),
    '27': (
        'You are a radiologist analyzing a B-mode ultrasound image focused on the carotid artery.\n'
        'Your task is carefully examine the arterial wall depicted in the provided ultrasound image, '
        'particularly the far wall if clearly visualized, to visually estimate the Intima-Media Thickness '
        '(IMT) – the combined thickness of the intima and media layers. You must determine if the image '
        'quality and presentation allow for a reasonable visual approximation of this measurement.\n'
        'If measurable, the IMT value should be provided as a floating-point number between 0.3 (indicating '
        'a thin, healthy intima-media complex) and 1.5 (indicating abnormally thickened wall).\n'
        'Output Instructions: \n'
        '1. If the IMT can be reasonably estimated, output only the single numerical value as a '
        'floating-point number.\n'
        "2. If the IMT cannot be reliably determined from the image, output only the exact string 'null'.\n"
        "Do not include units (like 'mm') or any other explanatory text in your response."
    ),
    '31': (
        'You are a radiologist analyzing a B-mode ultrasound image displaying an axial view suitable for '
        'biometry of the fetal head.\n'
        'Your task is to estimate the fetal head circumference (HC) in millimeters. The image displays the '
        'standard measurement plane (typically showing the thalami and cavum septum pellucidum). The '
        'physical size represented by a single pixel is {pixelSizeMm}mm.\n'
        'Using this information, identify the outer edge of the fetal skull, define the ellipse, and '
        'estimate the head circumference.\n'
        'Your estimate must be a single floating-point number between 100.0 mm (indicating very small HC) '
        'and 350.0 mm (indicating large HC), inclusive.\n'
        "Output format: only the single numerical head circumference value. Do not include units (like 'mm') "
        'or any other explanatory text.'
    ),
    '50': (
        'You are a radiologist analyzing a B-mode ultrasound image displaying a transverse/axial view '
        'suitable for biometry of the fetal abdomen.\n'
        'Your task is carefully evaluate the provided ultrasound image, identify the standard measurement '
        'plane for the Abdominal Circumference (AC), and visually estimate this measurement. This involves '
        'defining an ellipse following the outer skin line of the fetal abdomen at the correct level. '
        'Provide your best numerical estimate based only on the visual information.\n'
        'Your estimate must be a single floating-point number between 100.0 mm (indicating small AC) and '
        '400.0 mm (indicating large AC), inclusive.\n'
        'Output format: only the single numerical abdominal_circumference value as a floating-point number. '
        "Do not include units (like 'mm') or any other explanatory text."
    ),
    '57': (
        'You are a radiologist analyzing an ultrasound image of the liver.\n'
        'Your task is to meticulously evaluate the provided liver ultrasound image for visual indicators of '
        'fatty infiltration. Consider key features such as: parenchymal echogenicity, beam attenuation, '
        'vascular clarity.\n'
        'Based on the overall severity of these combined features, estimate a corresponding fat value. For '
        'the purpose of this specific task, you must map your qualitative assessment onto an integer scale '
        'ranging from 0 (indicating essentially no visible steatosis features) to 85 (indicating very severe '
        'steatosis features).\n'
        'Output format: only the single numerical integer representing your estimated fat value. The value '
        'must be between 0 and 85, inclusive. Do not include units, percentages, labels, or any other '
        'explanatory text.'
    ),
}
