"""Tools that are not the network and not how production loads it: making a Qwen3-VL hub folder offline.

`qwen_layout` writes a folder in Qwen3-VL-4B-Instruct's hub layout with random weights, from the published
configs and chat template (`qwen_published`) and Qwen's real BPE tokenizer (`qwen_vocab`). Their callers are
`scripts/make_qwen_layout.py`, the tests and the benchmarks; nothing the server or the CLI runs imports them
(`qwen_vocab` needs the `qwen-layout` extra). Checking a base folder before loading it is production's and stays
in `modeling.base_folder`.
"""
