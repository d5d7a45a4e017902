"""Answering prompts with a loaded model: the `Predictor` (an image set once, many prompts on it), the batched
decode (`decode_batch`: several rows on one KV cache, `fast_decode` and its serving-speed pieces
`packed_linear` and `step_builder`, drafts from earlier answers in `answer_drafts`), and the cross-request
`scheduler`. The network itself is `modeling/`; what an answer means is `answers/`."""
