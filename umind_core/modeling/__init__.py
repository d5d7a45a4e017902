"""The network pieces: the mask decoder, UMindVL around Qwen3-VL, and offline small configs."""
