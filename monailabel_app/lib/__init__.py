"""The UMind MONAI Label app's parts; main.py wires them together."""
