"""UMind's own lenient BLEU, kept as an explicit option beside the benchmark's pycocoevalcap BLEU-4.

It lowercases, splits punctuation and CJK characters into tokens and smooths missing orders, so it
scores Chinese reports without spaces and texts with punctuation more kindly than the benchmark's
whitespace BLEU does; its numbers are therefore not U2-Bench numbers.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

from ._u2bench_error import U2BenchInputError  # one error type for the whole protocol

# Latin words and numbers stay whole; each CJK character is its own token (reports may be Chinese);
# punctuation marks are tokens.
_TOKEN = re.compile(r"[\u3400-\u9fff]|[^\W\u3400-\u9fff]+|[^\w\s]")


def tokenize(text: str) -> list[str]:
    """Lower-cased tokens for BLEU."""
    if not isinstance(text, str):
        raise U2BenchInputError(f"text: expected a string, got {type(text).__name__}")
    return _TOKEN.findall(text.lower())


def _ngrams(tokens: list[str], n: int) -> Counter:
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def bleu_lenient(hypotheses: Sequence[str], references: Sequence[str | Sequence[str]], max_n: int = 4) -> float:
    """Corpus BLEU (Papineni et al. 2002) in [0, 1], clipped n-gram counts pooled over the corpus.

    Smoothing is the "exp" method (sacreBLEU's default) for orders 2..max_n: the k-th such order with
    no match gets precision 1 / (2^k * total) instead of 0, so one missing order does not zero the
    score. Unlike sacreBLEU, no unigram match at all gives 0: texts that share no word get no credit
    (sacreBLEU would give a disjoint 4-word pair about 0.08). Orders for which
    the hypotheses have no n-grams at all (every hypothesis shorter than n) are left out of the
    geometric mean. A reference may be one string or a list of strings; with several, counts are
    clipped by the maximum over them and the closest reference length enters the brevity penalty.
    """
    H = list(hypotheses)
    R = list(references)
    if len(H) != len(R):
        raise U2BenchInputError(f"references: {len(R)} for {len(H)} hypotheses")
    if not H:
        raise U2BenchInputError("hypotheses: empty")
    if max_n < 1:
        raise U2BenchInputError(f"max_n: must be >= 1, got {max_n}")
    matches = [0] * max_n
    totals = [0] * max_n
    hyp_len = ref_len = 0
    for i, (h, r) in enumerate(zip(H, R)):
        refs = [r] if isinstance(r, str) else list(r)
        if not refs:
            raise U2BenchInputError(f"references[{i}]: no reference text")
        ht = tokenize(h)
        rts = [tokenize(x) for x in refs]
        hyp_len += len(ht)
        # Closest reference length; ties go to the shorter one.
        ref_len += min((abs(len(rt) - len(ht)), len(rt)) for rt in rts)[1]
        for n in range(1, max_n + 1):
            hc = _ngrams(ht, n)
            max_ref: Counter = Counter()
            for rt in rts:
                max_ref |= _ngrams(rt, n)
            matches[n - 1] += sum(min(c, max_ref[g]) for g, c in hc.items())
            totals[n - 1] += sum(hc.values())
    if hyp_len == 0 or matches[0] == 0:
        return 0.0
    log_p = []
    k = 0
    for m, t in zip(matches, totals):
        if t == 0:
            continue
        if m == 0:
            k += 1
            log_p.append(math.log(1.0 / (2 ** k * t)))
        else:
            log_p.append(math.log(m / t))
    bp = 1.0 if hyp_len > ref_len else math.exp(1.0 - ref_len / hyp_len)
    return bp * math.exp(sum(log_p) / len(log_p))


