"""Tiny workload specs of every family, shared by the graph and instrumentation tests."""

TINY = {
    "hidden_size": 32,
    "num_layers": 2,
    "num_heads": 2,
    "intermediate_size": 64,
    "batch_size": 2,
}
SPECS = {
    "bert": {"family": "bert", "vocab_size": 100, "seq_len": 16, **TINY},
    "vit": {"family": "vit", "image_size": 32, "patch_size": 16, "num_labels": 10, **TINY},
    "t5": {"family": "t5", "vocab_size": 100, "seq_len": 16, **TINY},
    "llama": {"family": "llama", "vocab_size": 100, "seq_len": 16, **TINY},
    "deit": {"family": "deit", "image_size": 32, "patch_size": 16, "num_labels": 10, **TINY},
}
