"""The server-side clustering steps of the strategies: numpy in, numpy out (no Flower here)."""
