"""The runner: a separate process that owns torch and the GPU. It never imports Textual."""
