"""Re-ranking methods: aqe, dba and krnn (docs/reranking.md), registered as ``rerankers``."""
