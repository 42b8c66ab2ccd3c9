"""Layers: the 2D multi-head self-attention layer and its positional encodings (each computation with a
literal reference and its exact fast paths), mixed attention and light/dynamic convolutions, and the
conversion between convolutions and attention (Theorem 1)."""
