"""Moving a prompt's KV from a prefill pool to a decode pool: bytes, link time, what moves.

Disaggregated serving (Splitwise, DistServe, Mooncake; NVIDIA Dynamo, llm-d, SGLang and vLLM
run it) prefills on one pool and decodes on another. The prompt's KV crosses a link between
them. The model, with its assumptions:

- **Bytes.** ``B = prompt tokens x KV bytes per token`` of the *decode* deployment (every byte
  it stores, all layers, its KV precision and any replication across its ranks: each
  receiving rank gets its own copy). A transfer moves the whole prompt's KV once; the decode
  pool recomputes the prompt's last token to emit the first output token (as vLLM does
  after a full prefix hit), so the client's first token comes from the decode pool.
- **Link.** ``links`` parallel links of ``bandwidth`` each (one direction), ``latency`` one
  way and a fixed ``per_transfer`` cost (handshake, memory registration). Transfers leaving
  one prefill replica share its links first come first served (a replica's links carry one
  transfer at a time); links of different replicas are independent (a non-blocking fabric).
- **Whole transfer.** The KV leaves once the prefill ends:
  ``wire_end = max(link_free, prefill_end) + B / (links x bandwidth)``.
- **Layer-streamed transfer** (what Splitwise, Mooncake, Dynamo and vLLM's NIXL connector
  overlap with prefill): the prefill window ``[prefill_start, prefill_end]`` produces the KV
  of its ``L`` layers evenly (a fluid model of layers and chunks); each layer's share leaves
  when it is ready. With ``b = links x bandwidth`` and ``P = prefill_end - prefill_start``:
  ``wire_end = max(max(link_free, prefill_start + P / L) + B / b, prefill_end + B / (L b))``
  (the first layer's share gates a backlogged link; the last layer's share follows the
  prefill otherwise).
- **Arrival** at the decode pool: ``wire_end + latency + per_transfer``. The prefill replica
  frees its KV blocks when its prefill ends (optimistic: real stacks hold them until the
  decode side has pulled them).
- **What moves, per architecture.** GPUs and dataflow machines with HBM or DDR import KV
  (``kv``). Wafer-scale and LPU decode pools hold KV in on-chip SRAM laid out by a compiled
  static schedule and publish no KV import path (their APIs take prompts), so ``auto``
  sends them the prompt (``TOKEN_ID_BYTES`` a token) and they prefill it again (``prompt``):
  confidence *assumed* (absence of a documented path, not a measured limit).

Link figures (one direction; ``confidence`` as in hardware profiles):

============================== =============== ================ ==========================================
link                           bandwidth       latency (1-way)  source, confidence
============================== =============== ================ ==========================================
NVLink 4 (H100 SXM, per GPU)   450 GB/s        ~1-2 us          H100 datasheet: 900 GB/s bidirectional;
                                                                datasheet (latency assumed)
NVLink 5 (B200, per GPU)       900 GB/s        ~1-2 us          B200 datasheet: 1.8 TB/s bidirectional;
                                                                datasheet (latency assumed)
InfiniBand NDR (per port)      50 GB/s         ~2-5 us (RDMA)   NVIDIA ConnectX-7 / Quantum-2: 400 Gb/s;
                                                                datasheet (latency assumed)
RoCE 400 GbE (per port)        50 GB/s         ~5-10 us         IEEE 802.3df 400GBASE; datasheet
                                                                (latency assumed)
Ethernet 100 GbE, TCP          12.5 GB/s       ~20-50 us        IEEE 802.3 100GBASE; datasheet (latency
(between vendors)                                               and TCP overhead assumed)
PCIe Gen5 x16                  ~63 GB/s        ~1 us            PCI-SIG: 32 GT/s x 16, 128b/130b; datasheet
CXL 2.0 (PCIe 5 x16)           ~63 GB/s        ~0.2-0.4 us      same PHY as PCIe 5; load latency about
                                                                2x local DRAM (Sun et al., MICRO 2023);
                                                                measured
============================== =============== ================ ==========================================

A DGX H100 has eight NDR ports, one per GPU, so a TP8 replica moves its KV over
``links: 8`` (400 GB/s). Mooncake's transfer engine reports tens to ~190 GB/s on 4-8 RDMA
NICs (Qin et al., FAST 2025; recalled, verify before relying on it): the same order.
"""

from __future__ import annotations

from typing import Literal

from simulator.config.fleet import KVLinkSpec

#: Bytes of one token id on the wire (int32, as vLLM and Hugging Face tokenizers emit them).
TOKEN_ID_BYTES = 4.0
#: Decode hardware families with no KV import path (see the module docstring): they get the prompt.
PROMPT_ONLY_FAMILIES = frozenset({"wafer-scale", "lpu"})

Handoff = Literal["kv", "prompt"]


def handoff_kind(link: KVLinkSpec, decode_family: str) -> Handoff:
    """What crosses the link: the link's choice, or for ``auto`` the decode pool's architecture's.

    >>> from simulator.config.fleet import KVLinkSpec
    >>> link = KVLinkSpec(bandwidth="50 GB/s")
    >>> handoff_kind(link, "wafer-scale"), handoff_kind(link, "gpu")
    ('prompt', 'kv')
    """
    if link.handoff != "auto":
        return link.handoff
    return "prompt" if decode_family in PROMPT_ONLY_FAMILIES else "kv"


def transfer_bytes(prompt_tokens: float, kv_bytes_per_token: float, kind: Handoff) -> float:
    """Bytes one handoff moves: the prompt's KV, or its token ids.

    >>> transfer_bytes(1000, 327_680.0, "kv")  # Llama 3.1 70B bf16: 320 KiB of KV a token
    327680000.0
    >>> transfer_bytes(1000, 327_680.0, "prompt")
    4000.0
    """
    return prompt_tokens * (kv_bytes_per_token if kind == "kv" else TOKEN_ID_BYTES)


def wire_end_s(
    link: KVLinkSpec, nbytes: float, layers: int, prefill_start_s: float, prefill_end_s: float, link_free_s: float
) -> float:
    """When the last byte leaves the sender's links (module docstring, whole or layer-streamed).

    >>> link = KVLinkSpec(bandwidth="1 GB/s", streaming="whole")
    >>> wire_end_s(link, 1e9, 10, 0.0, 2.0, 0.0)
    3.0
    >>> wire_end_s(link.model_copy(update={"streaming": "layer"}), 1e9, 10, 0.0, 2.0, 0.0)
    2.1
    """
    rate = link.bandwidth * link.links
    if link.streaming == "whole":
        return max(link_free_s, prefill_end_s) + nbytes / rate
    first_layer_ready_s = prefill_start_s + (prefill_end_s - prefill_start_s) / layers
    return max(max(link_free_s, first_layer_ready_s) + nbytes / rate, prefill_end_s + nbytes / (layers * rate))


def arrival_s(link: KVLinkSpec, wire_end: float) -> float:
    """When the KV (or prompt) is usable at the decode pool: wire end + latency + per-transfer cost."""
    return wire_end + link.latency + link.per_transfer
