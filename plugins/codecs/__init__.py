"""Index codecs: float32, float16, int8, binary, pq, ivf and hnsw (docs/bundle.md), registered as ``index_codecs``.

``dmlplug index --codec NAME[:key=value,...]`` names one (``float32``, exact, is the default); ``--budget`` chooses
among those that compress (float32, float16, int8, binary, pq). This module holds the Params, the factories and
the registration hook and stays light (no numpy or faiss at import); the codecs live in :mod:`.faiss_codecs` and
:mod:`.binary`, imported by the factories.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from dmlplug import BuildContext, Params, hookimpl


class NoParams(Params):
    """Parameters of a codec that has none."""


class IvfParams(Params):
    """Parameters of codec 'ivf'."""

    nlist: int | None = Field(None, ge=1, description="Inverted lists (default ≈ √N, at most N/39).")
    nprobe: int | None = Field(None, ge=1, description="Lists searched per query (default nlist/8, at least 8).")


class PqParams(IvfParams):
    """Parameters of codec 'pq'."""

    pq_m: int | None = Field(None, ge=1, description="Sub-vectors, a divisor of the embedding size (default: the "
                             "largest up to d/4; under --budget the most that fit, up to d/2).")
    pq_nbits: int | None = Field(None, ge=1, le=16, description="Bits per sub-vector code (default 8, fewer when "
                                 "under 39·2^nbits training vectors).")


class HnswParams(Params):
    """Parameters of codec 'hnsw'."""

    ef_search: int | None = Field(None, ge=1, description="Candidates kept while searching the graph (default "
                                  "max(64, 2k)).")


class BinaryParams(Params):
    """Parameters of codec 'binary'."""

    rescore: int = Field(10, ge=1, description="Hamming candidates rescored, times max(k, 10).")
    rescore_from: Literal["disk", "int8", "none"] = Field(
        "disk", description="What rescores them: disk (the float32 vectors in a memory-mapped file; memory holds the "
        "sign bits only), int8 (int8 codes in memory, d bytes more a vector) or none (the Hamming order).")


def build_float32(params: NoParams, ctx: BuildContext) -> Any:
    """Exact search (the default)."""
    from dmlplug_builtins.codecs.faiss_codecs import Float32

    return Float32(params, "float32")


def build_float16(params: NoParams, ctx: BuildContext) -> Any:
    """Half floats."""
    from dmlplug_builtins.codecs.faiss_codecs import ScalarQuantised

    return ScalarQuantised(params, "float16", bits=16)


def build_int8(params: NoParams, ctx: BuildContext) -> Any:
    """8-bit scalar quantisation."""
    from dmlplug_builtins.codecs.faiss_codecs import ScalarQuantised

    return ScalarQuantised(params, "int8", bits=8)


def build_pq(params: PqParams, ctx: BuildContext) -> Any:
    """IVF-PQ."""
    from dmlplug_builtins.codecs.faiss_codecs import ProductQuantised

    return ProductQuantised(params, "pq")


def build_ivf(params: IvfParams, ctx: BuildContext) -> Any:
    """IVF, flat vectors."""
    from dmlplug_builtins.codecs.faiss_codecs import InvertedLists

    return InvertedLists(params, "ivf")


def build_hnsw(params: HnswParams, ctx: BuildContext) -> Any:
    """An HNSW graph."""
    from dmlplug_builtins.codecs.faiss_codecs import Graph

    return Graph(params, "hnsw")


def build_binary(params: BinaryParams, ctx: BuildContext) -> Any:
    """Sign bits, rescored."""
    from dmlplug_builtins.codecs.binary import BinaryCodec

    return BinaryCodec(params)


@hookimpl
def register_index_codecs(register: Any) -> None:
    """The built-in index codecs."""
    register("float32", build_float32, params=NoParams,
             description="Exact search of the float32 vectors (4·d bytes a vector): the default.")
    register("float16", build_float16, params=NoParams,
             description="faiss IDMap,SQfp16: half floats (2·d + 8 bytes), recall ≈ 1.")
    register("int8", build_int8, params=NoParams,
             description="faiss IDMap,SQ8: per-dimension 8-bit ranges trained on the gallery (d + 8 bytes).")
    register("binary", build_binary, params=BinaryParams,
             description="Sign bits in memory (d/8 + 8 bytes), a Hamming shortlist rescored from float32 vectors "
                         "on disk (or int8 codes in memory).")
    register("pq", build_pq, params=PqParams,
             description="faiss IVF{nlist},PQ{m}x{nbits}: product quantisation in inverted lists "
                         "(m·nbits/8 + 8 bytes).")
    register("ivf", build_ivf, params=IvfParams,
             description="faiss IVF{nlist},Flat: nprobe of nlist lists searched, vectors uncompressed.")
    register("hnsw", build_hnsw, params=HnswParams,
             description="faiss IDMap2,HNSW32: a graph, fast approximate search (4·d + graph + label map "
                         "bytes); cannot remove items.")
