"""Index codecs: float32, float16, int8, binary, pq, ivf and hnsw (docs/bundle.md), registered as ``index_codecs``."""
