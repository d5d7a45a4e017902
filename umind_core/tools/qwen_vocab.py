"""Qwen's real byte-level BPE tokenizer, built offline from its published merge ranks.

Qwen2 and Qwen3 share one regular vocabulary: 151,643 byte strings with their BPE ranks, which Alibaba publishes
as `qwen.tiktoken` (base64 token, rank per line). The Apache-2.0 package `dashscope` ships that file; it is a
test/bench extra of this project, never a runtime dependency, so it is imported only when a tokenizer is built.

From the ranks this module writes what a Qwen3-VL hub folder holds: `tokenizer.json` (the `tokenizers` BPE with
Qwen's pre-tokenizer regex, NFC and byte-level decoding), `vocab.json` + `merges.txt`, and `tokenizer_config.json`
with Qwen3's 26 special tokens at their published ids (151643..151668). A merge (a, b) exists for every split of
a ranked token into two ranked halves and is ordered by the rank of the merged token: the same result as Qwen's
rank-driven BPE, which `tests/test_qwen_layout.py` checks against `tiktoken` itself.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from ..atomic import write_text

__all__ = ["QwenVocabError", "REGULAR_VOCAB_SIZE", "SPECIAL_TOKENS", "PRETOKENIZE_REGEX", "ranks_file",
           "load_ranks", "special_token_ids", "build_tokenizer", "write_tokenizer_files"]

REGULAR_VOCAB_SIZE = 151643
#: Qwen3's added tokens in id order from 151643, with their `special` flag as the hub's tokenizer.json sets it.
SPECIAL_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True), ("<|quad_start|>", True),
    ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False), ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False),
)
#: Qwen2/Qwen3's pre-tokenizer: digits one by one, letters with one leading non-letter, punctuation runs.
PRETOKENIZE_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                     r"|\s*[\r\n]+|\s+(?!\S)|\s+")
#: The tokens the hub's tokenizer_config.json lists as additional special tokens.
_ADDITIONAL_SPECIAL = tuple(tok for tok, special in SPECIAL_TOKENS[1:14])


class QwenVocabError(RuntimeError):
    """The ranks file is missing or not Qwen's; the message names the file and what is wrong."""


def ranks_file() -> Path:
    """Where `dashscope` keeps qwen.tiktoken; a clear error when the extra is not installed."""
    try:
        import dashscope
    except ImportError:
        raise QwenVocabError(
            "building Qwen's tokenizer needs the ranks file that the `dashscope` package ships (Apache-2.0): "
            "pip install 'umind[qwen-layout]' (a test/bench extra, not a runtime dependency)"
        ) from None
    path = Path(dashscope.__file__).resolve().parent / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise QwenVocabError(f"{path} is missing: this dashscope release does not ship Qwen's BPE ranks")
    return path


def load_ranks(path: str | Path | None = None) -> dict[bytes, int]:
    """Token bytes -> rank, checked to be Qwen's dense 0..151642 table."""
    path = Path(path) if path is not None else ranks_file()
    ranks: dict[bytes, int] = {}
    for lineno, line in enumerate(path.read_text(encoding="ascii").splitlines(), 1):
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except ValueError as exc:
            raise QwenVocabError(f"{path}:{lineno} is not 'base64 rank': {exc}") from None
    if len(ranks) != REGULAR_VOCAB_SIZE or sorted(ranks.values()) != list(range(REGULAR_VOCAB_SIZE)):
        raise QwenVocabError(f"{path} holds {len(ranks)} ranks, not Qwen's dense 0..{REGULAR_VOCAB_SIZE - 1}")
    return ranks


def special_token_ids() -> dict[str, int]:
    return {tok: REGULAR_VOCAB_SIZE + i for i, (tok, _) in enumerate(SPECIAL_TOKENS)}


def _last_merge(token: bytes, rank: int, ranks: dict[bytes, int]) -> list[bytes]:
    """The parts that rank-driven BPE, allowed only ranks below `rank`, leaves of `token` (two when it is reachable)."""
    parts = [token[i:i + 1] for i in range(len(token))]
    while len(parts) > 2:
        best, at = rank, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1], rank)
            if r < best:
                best, at = r, i
        if at < 0:
            break
        parts[at:at + 2] = [parts[at] + parts[at + 1]]
    return parts


def _vocab_and_merges(ranks: dict[bytes, int]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Byte-level strings for each token and one merge per multi-byte token, in rank order.

    The merge of a token is the last step BPE takes to build it from lower-ranked tokens, as in a trained BPE's
    merges.txt (one line per token above the 256 bytes).
    """
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    byte_char = bytes_to_unicode()

    def as_str(b: bytes) -> str:
        return "".join(byte_char[x] for x in b)

    vocab = {as_str(tok): rank for tok, rank in ranks.items()}
    merges = []
    for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(tok) == 1:
            continue
        parts = _last_merge(tok, rank, ranks)
        if len(parts) != 2:
            raise QwenVocabError(f"token {tok!r} (rank {rank}) cannot be built from lower-ranked tokens")
        merges.append((as_str(parts[0]), as_str(parts[1])))
    return vocab, merges


def build_tokenizer(ranks: dict[bytes, int] | None = None):
    """The `tokenizers.Tokenizer` of Qwen3: BPE from the ranks plus the 26 added tokens at 151643..151668."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE

    vocab, merges = _vocab_and_merges(ranks if ranks is not None else load_ranks())
    tok = Tokenizer(BPE(vocab=vocab, merges=merges, dropout=None, unk_token=None, continuing_subword_prefix="",
                        end_of_word_suffix="", fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_tokens([AddedToken(t, special=s, normalized=False) for t, s in SPECIAL_TOKENS])
    ids = special_token_ids()
    wrong = {t: tok.token_to_id(t) for t in ids if tok.token_to_id(t) != ids[t]}
    if wrong:
        raise QwenVocabError(f"special tokens landed at other ids than Qwen's: {wrong}")
    return tok, vocab, merges


def tokenizer_config(chat_template: str, model_max_length: int = 262144) -> dict:
    """tokenizer_config.json as the Qwen3-VL hub folder has it."""
    ids = special_token_ids()
    decoder = {str(ids[t]): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                             "single_word": False, "special": s} for t, s in SPECIAL_TOKENS}
    return {
        "add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": decoder,
        "additional_special_tokens": list(_ADDITIONAL_SPECIAL), "bos_token": None,
        "chat_template": chat_template, "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>",
        "errors": "replace", "model_max_length": model_max_length, "pad_token": "<|endoftext|>",
        "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer", "unk_token": None,
    }


def write_tokenizer_files(folder: str | Path, chat_template: str, ranks: dict[bytes, int] | None = None) -> list[Path]:
    """tokenizer.json, vocab.json, merges.txt and tokenizer_config.json, each written atomically."""
    folder = Path(folder)
    tok, vocab, merges = build_tokenizer(ranks)
    merges_txt = "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges)
    files = {
        "tokenizer.json": tok.to_str(pretty=False),
        "vocab.json": json.dumps(vocab, ensure_ascii=False, separators=(",", ":")),
        "merges.txt": merges_txt,
        "tokenizer_config.json": json.dumps(tokenizer_config(chat_template), indent=2, ensure_ascii=False) + "\n",
    }
    return [write_text(folder / name, text) for name, text in files.items()]
