"""How the network runs fast on a CPU, apart from what it computes: each module here changes the arithmetic's
speed or memory and is tested to give the network's own answers (the patch embedding as one matrix product, the
adapter's token rows merged once per weight change, bf16 weights computed in float32)."""
