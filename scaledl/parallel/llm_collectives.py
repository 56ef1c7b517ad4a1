"""Hierarchical NCCL collective times for LLM training: NVLink inside a domain, NICs between.

A group of ``size`` ranks with ``ranks_per_domain`` of them in each NVLink domain (an HGX/DGX
node of 8 GPUs, an NVL72 rack of 72) spans ``d = ceil(size / ranks_per_domain)`` domains.

**Bandwidth** (bus bandwidth ``busbw``, as nccl-tests defines it): inside one domain the
NVLink bandwidth ``B_nv`` (device table ``nvlink_gbps``, per GPU one direction) times its
measured efficiency. Across domains NCCL builds its rings and trees over every NIC of the ranks
of the group in a domain (one NIC per GPU on rail-optimised DGX/HGX networks), so the bus
bandwidth is ``min(eff_nv B_nv, ranks_per_domain * eff_net B_net)`` with ``B_net`` the
device table's ``network_gbps`` (per-GPU share of the scale-out NICs). A group with one rank
per node (data parallel across tensor-parallel nodes) gets one NIC; the other ranks of the node
run their own groups on their own NICs at the same time.

**Times** of a ``message_bytes`` message (``n``):

* ``all_reduce``: ``latency + 2 (p-1)/p n / busbw`` (ring; Thakur et al. 2005);
* ``all_gather`` (``n`` = output), ``reduce_scatter`` (``n`` = input): ``latency + (p-1)/p
  n / busbw``;
* ``send_recv`` (``n`` sent by one rank): ``alpha_p2p + n / (eff_p2p B)`` over NVLink when the
  group lies in one domain, else over the NIC;
* ``all_to_all`` (``n`` held by each rank, ``(p-1)/p`` of it leaves): ``latency + max((r-1)/p
  n / bw_nv, (p-r)/p n / (eff_net B_net))`` with ``r = ranks_per_domain``.

**Latency**: NCCL picks the ring for bandwidth and the tree (double binary tree, Sanders et al.
2009) for latency across nodes; the model takes the ring's bandwidth and the tree's depth:
``latency = alpha_nv`` inside a domain and ``alpha_nv + alpha_net * ceil(log2 d)`` across
``d`` domains.

**Measured efficiencies** (:func:`network_model`), from Vidur's NCCL measurements
(``external/vidur/network``, microsoft/vidur, MIT): ``alpha_nv`` and ``eff_nv`` from the
single-node all-reduces of the DGX A100 and DGX H100 nodes (2, 4, 8 GPUs, 2 KiB-64 MiB, one
link for the three sizes), ``alpha_p2p`` and ``eff_p2p`` inside a node from their two-GPU
send/recv, and ``alpha_net``, ``eff_net`` from the DGX H100 send/recv between two nodes (against
50 GB/s per GPU: one 400 Gb/s ConnectX-7 NIC per GPU, the DGX H100 design). Each link has up to
three message-size regimes (NCCL's LL, LL128 and Simple protocols), breakpoints chosen by
:func:`~scaledl.models.allreduce.select_size_breakpoints` and each regime's alpha-beta line by
:class:`~scaledl.models.allreduce.AlphaBetaAllReduce` (relative least squares); the largest
messages' regime is the one training's messages use. Vidur's A100 two-node measurements reach
6-8 GB/s per GPU and about 20 GB/s per node, far below a DGX A100's eight 200 Gb/s HDR NICs,
so they describe a different, slower network: they test the model's structure
(:func:`evaluate_network_model`, with that system's per-GPU and per-node bandwidths fitted)
but do not set the efficiency used for other systems. A GPU without measurements takes
the NVLink fit of the measured DGX closest in 16-bit tensor peak
(:func:`scaledl.models.llm_kernels.reference_gpu`) with its own datasheet bandwidths.
:func:`peak_network_model` is the datasheet: efficiency 1, no latency.

Results are cached per call (``lru_cache``); no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Literal, Protocol, get_args

import numpy as np
import pandas as pd
from scipy.optimize import least_squares, nnls

from scaledl.devices.specs import device_spec, resolve_gpu_name
from scaledl.external.vidur import load_vidur_allreduce, load_vidur_send_recv
from scaledl.models.allreduce import AlphaBetaAllReduce, select_size_breakpoints
from scaledl.models.llm_kernels import reference_gpu

Op = Literal["all_reduce", "all_gather", "reduce_scatter", "send_recv", "all_to_all"]
OPS: tuple[str, ...] = get_args(Op)
#: Vidur's DGX system of each measured GPU (:data:`scaledl.models.llm_kernels.MEASURED_GPUS`).
DGX_SYSTEMS = {"a100": "a100_dgx", "h100": "h100_dgx"}
#: The device table's name of each Vidur DGX system's GPU.
SYSTEM_DEVICES = {"a100_dgx": "NVIDIA A100-SXM4-80GB", "h100_dgx": "NVIDIA H100 80GB HBM3"}
#: The system whose two-node send/recv sets the NIC efficiency (module docstring).
NETWORK_SYSTEM = "h100_dgx"


@dataclass(frozen=True)
class CommGroup:
    """A communicator.

    Attributes:
        size: ranks in the group (>= 1).
        ranks_per_domain: of those, how many share one NVLink domain (``== size``: all on
            NVLink), in ``[1, size]``; the group spans ``ceil(size / ranks_per_domain)``
            domains.
    """

    size: int
    ranks_per_domain: int

    def __post_init__(self) -> None:
        if not (isinstance(self.size, int) and self.size >= 1):
            raise ValueError(f"CommGroup.size must be an integer >= 1; got {self.size!r}")
        r = self.ranks_per_domain
        if not (isinstance(r, int) and 1 <= r <= self.size):
            raise ValueError(
                f"CommGroup.ranks_per_domain must be an integer in [1, size={self.size}]; got {r!r}"
            )

    @property
    def domains(self) -> int:
        """NVLink domains the group spans."""
        return -(-self.size // self.ranks_per_domain)


class NetworkModel(Protocol):
    """Collective times on one GPU type's systems, in seconds."""

    def collective_s(self, op: Op, message_bytes: float, group: CommGroup) -> float:
        """One collective (module docstring for what ``message_bytes`` is per op)."""
        ...


@dataclass(frozen=True)
class LinkFit:
    """Latency and efficiency of one kind of transfer, per message-size regime.

    Attributes:
        alpha_s: latency per call (across domains: per tree level) of the largest messages,
            seconds.
        efficiency: achieved / datasheet bandwidth of the largest messages (the regime
            extrapolated to training's messages).
        small: ``(upper_bytes, alpha_s, efficiency)`` of smaller messages, ascending: a message
            below ``upper_bytes`` takes the first such regime (NCCL's LL and LL128 protocols).
    """

    alpha_s: float
    efficiency: float
    small: tuple[tuple[float, float, float], ...] = ()

    def at(self, message_bytes: float) -> tuple[float, float]:
        """``(alpha_s, efficiency)`` of a message of ``message_bytes``."""
        for upper, alpha, efficiency in self.small:
            if message_bytes < upper:
                return alpha, efficiency
        return self.alpha_s, self.efficiency

    def seconds(self, x_s: np.ndarray, message_bytes: np.ndarray) -> np.ndarray:
        """``alpha + x / efficiency`` per message (``x``: seconds at the datasheet speed)."""
        pairs = np.array([self.at(float(b)) for b in np.atleast_1d(message_bytes)])
        return pairs[:, 0] + np.atleast_1d(x_s) / pairs[:, 1]


@dataclass(frozen=True)
class NetworkFit:
    """Fitted (or datasheet) links of one system (module docstring).

    Attributes:
        nvlink: collectives inside an NVLink domain.
        nvlink_p2p: send/recv inside a domain.
        network: per tree level latency and NIC efficiency across domains.
        source: what the numbers come from.
    """

    nvlink: LinkFit
    nvlink_p2p: LinkFit
    network: LinkFit
    source: str


def _line(x: np.ndarray, t: np.ndarray) -> LinkFit:
    """Relative-error NNLS of ``t = alpha + x * inv_eff`` (``x``: seconds at datasheet speed)."""
    design = np.column_stack([np.ones_like(x), x]) / t[:, None]
    (alpha, inv_eff), _ = nnls(design, np.ones_like(t))
    return LinkFit(float(alpha), float(1.0 / inv_eff) if inv_eff > 0 else math.inf)


def fit_link(
    message_bytes: np.ndarray, world_size: np.ndarray, time_s: np.ndarray, bandwidth: float
) -> LinkFit:
    """Fit a link's regimes on measured ring all-reduces (or send/recv: ``world_size`` 2).

    Message-size breakpoints are chosen on the data by
    :func:`scaledl.models.allreduce.select_size_breakpoints` and each regime's alpha-beta line
    fitted by :class:`~scaledl.models.allreduce.AlphaBetaAllReduce` (relative least squares on
    ``2 (p-1)/p * bytes``: ``bytes`` for two ranks, a send/recv's volume).

    Args:
        message_bytes: buffer sizes, bytes.
        world_size: ranks of each measurement.
        time_s: measured seconds.
        bandwidth: the link's datasheet bandwidth, bytes/s (efficiency = achieved / this).

    Returns:
        The :class:`LinkFit`.
    """
    ms = np.asarray(time_s, dtype=float) * 1e3
    breakpoints = select_size_breakpoints(message_bytes, world_size, ms)
    model = AlphaBetaAllReduce(size_breakpoints_bytes=breakpoints).fit(
        message_bytes, world_size, ms
    )
    regimes = []
    for regime in range(len(breakpoints) + 1):
        alpha_ms, ms_per_byte = model.params_[((), regime)]
        efficiency = 1.0 / (ms_per_byte * 1e-3) / bandwidth if ms_per_byte > 0 else math.inf
        regimes.append((alpha_ms * 1e-3, efficiency))
    small = tuple((b, a, e) for b, (a, e) in zip(breakpoints, regimes[:-1], strict=True))
    return LinkFit(*regimes[-1], small=small)


def _bandwidths(device: str) -> tuple[float, float]:
    """``(nvlink, network)`` datasheet bandwidths of a device in bytes/s (NaN: unknown)."""
    spec = device_spec(device)
    return spec.nvlink_gbps * 1e9, spec.network_gbps * 1e9


def _ring_seconds(allreduce: pd.DataFrame, bandwidth: float) -> np.ndarray:
    p = allreduce["world_size"].to_numpy(float)
    return 2.0 * (p - 1.0) / p * allreduce["allreduce_bytes"].to_numpy(float) / bandwidth


def fit_nvlink(allreduce: pd.DataFrame, send_recv: pd.DataFrame, system: str) -> NetworkFit:
    """Fit a DGX system's NVLink links and the NIC efficiency (module docstring).

    Args:
        allreduce: :func:`scaledl.external.vidur.load_vidur_allreduce` rows.
        send_recv: :func:`~scaledl.external.vidur.load_vidur_send_recv` rows.
        system: ``a100_dgx`` or ``h100_dgx``.

    Returns:
        The system's :class:`NetworkFit` (its ``network`` link from :data:`NETWORK_SYSTEM`).

    Raises:
        ValueError: the system has no single-node all-reduce or send/recv rows.
    """
    nvlink_bw, _ = _bandwidths(SYSTEM_DEVICES[system])
    rows = allreduce[(allreduce["system"] == system) & (allreduce["num_nodes"] == 1)]
    p2p = send_recv[(send_recv["system"] == system) & (send_recv["num_nodes"] == 1)]
    if rows.empty or p2p.empty:
        raise ValueError(f"Vidur network data: no single-node rows of system {system!r}")
    nvlink = fit_link(
        rows["allreduce_bytes"].to_numpy(float),
        rows["world_size"].to_numpy(float),
        rows["allreduce_ms"].to_numpy() * 1e-3,
        nvlink_bw,
    )
    nvlink_p2p = fit_link(
        p2p["bytes"].to_numpy(), np.full(len(p2p), 2.0), p2p["time_ms"].to_numpy() * 1e-3, nvlink_bw
    )
    return NetworkFit(nvlink, nvlink_p2p, fit_network(send_recv), source=f"Vidur {system}")


def fit_network(send_recv: pd.DataFrame) -> LinkFit:
    """The NIC latency and efficiency from :data:`NETWORK_SYSTEM`'s two-node send/recv."""
    _, network_bw = _bandwidths(SYSTEM_DEVICES[NETWORK_SYSTEM])
    rows = send_recv[(send_recv["system"] == NETWORK_SYSTEM) & (send_recv["num_nodes"] == 2)]
    if rows.empty:
        raise ValueError(f"Vidur network data: no two-node send/recv of {NETWORK_SYSTEM!r}")
    return fit_link(
        rows["bytes"].to_numpy(), np.full(len(rows), 2.0), rows["time_ms"].to_numpy() * 1e-3,
        network_bw,
    )  # fmt: skip


@cache
def measured_network_fit(gpu: str) -> NetworkFit:
    """The fitted links of a measured GPU (``a100``/``h100``), cached per process."""
    return fit_nvlink(load_vidur_allreduce(), load_vidur_send_recv(), DGX_SYSTEMS[gpu])


#: The links of :func:`peak_network_model`: the datasheet, no latency.
PEAK_NETWORK_FIT = NetworkFit(
    LinkFit(0.0, 1.0), LinkFit(0.0, 1.0), LinkFit(0.0, 1.0), source="datasheet bandwidths"
)


@dataclass(frozen=True)
class HierarchicalNetwork:
    """Collective times of one GPU's systems (module docstring).

    Attributes:
        device: the device-table name.
        nvlink_domain_size: GPUs per NVLink domain.
        nvlink_bw: NVLink bandwidth per GPU, one direction, bytes/s.
        network_bw: NIC bandwidth per GPU, one direction, bytes/s.
        fit: latencies and efficiencies.
    """

    device: str
    nvlink_domain_size: int
    nvlink_bw: float
    network_bw: float
    fit: NetworkFit

    def _bus(self, group: CommGroup, message_bytes: float) -> tuple[float, float]:
        """``(latency_s, busbw)`` of a collective of ``message_bytes`` over ``group``."""
        alpha_nv, efficiency_nv = self.fit.nvlink.at(message_bytes)
        nvlink = efficiency_nv * self.nvlink_bw
        if group.domains == 1:
            return alpha_nv, nvlink
        alpha_net, efficiency_net = self.fit.network.at(message_bytes / group.domains)
        levels = math.ceil(math.log2(group.domains))
        network = efficiency_net * self.network_bw
        return alpha_nv + alpha_net * levels, min(nvlink, group.ranks_per_domain * network)

    @lru_cache(maxsize=65536)  # noqa: B019 - instances are per-(device, domain) singletons
    def collective_s(self, op: Op, message_bytes: float, group: CommGroup) -> float:
        """One collective in seconds (module docstring).

        Args:
            op: one of :data:`OPS`.
            message_bytes: all_reduce: the buffer; all_gather: the output; reduce_scatter:
                the input; send_recv: what one rank sends; all_to_all: what one rank holds.
            group: the communicator; a group of one costs 0.

        Raises:
            ValueError: an unknown op, a negative or non-finite size, or a group whose
                ``ranks_per_domain`` exceeds the NVLink domain.
        """
        if op not in OPS:
            raise ValueError(f"op must be one of {OPS}; got {op!r}")
        if not (math.isfinite(message_bytes) and message_bytes >= 0):
            raise ValueError(f"message_bytes must be finite and >= 0; got {message_bytes!r}")
        if group.ranks_per_domain > self.nvlink_domain_size:
            raise ValueError(
                f"{self.device}: group {group} has {group.ranks_per_domain} ranks per NVLink "
                f"domain but a domain holds {self.nvlink_domain_size} GPUs"
            )
        p = group.size
        if p == 1 or message_bytes == 0:
            return 0.0
        n = float(message_bytes)
        if op == "send_recv":
            if group.domains == 1:
                link, bw = self.fit.nvlink_p2p, self.nvlink_bw
            else:
                link, bw = self.fit.network, self.network_bw
            alpha, efficiency = link.at(n)
            return alpha + n / (efficiency * bw)
        latency, bus = self._bus(group, n)
        if op == "all_reduce":
            return latency + 2.0 * (p - 1) / p * n / bus
        if op in ("all_gather", "reduce_scatter"):
            return latency + (p - 1) / p * n / bus
        r = group.ranks_per_domain
        intra = (r - 1) / p * n / (self.fit.nvlink.at(n)[1] * self.nvlink_bw)
        inter = (p - r) / p * n / (self.fit.network.at(n / p)[1] * self.network_bw)
        return latency + max(intra, inter)


def _build(
    gpu: str, nvlink_domain_size: int | None, fit: NetworkFit | None, network_gbps: float | None
):
    device = resolve_gpu_name(gpu)
    spec = device_spec(device)
    domain = spec.nvlink_domain if nvlink_domain_size is None else nvlink_domain_size
    if not (isinstance(domain, int) and domain >= 1):
        raise ValueError(
            f"{device}: nvlink_domain_size must be an integer >= 1; got {domain!r} (the device "
            "table has no NVLink domain for it: a PCIe card?)"
        )
    nvlink_bw, network_bw = _bandwidths(device)
    if network_gbps is not None:
        if not (isinstance(network_gbps, (int, float)) and math.isfinite(network_gbps)):
            raise ValueError(f"network_gbps must be a finite number; got {network_gbps!r}")
        if network_gbps <= 0:
            raise ValueError(f"network_gbps must be > 0; got {network_gbps!r}")
        network_bw = float(network_gbps) * 1e9
    if not (nvlink_bw > 0 and network_bw > 0):
        raise ValueError(
            f"{device}: the device table has no nvlink_gbps / network_gbps "
            f"({spec.nvlink_gbps}, {spec.network_gbps}); add them with their source"
        )
    if fit is None:
        fit = measured_network_fit(reference_gpu(device))
    return HierarchicalNetwork(device, domain, nvlink_bw, network_bw, fit)


@cache
def network_model(
    gpu: str, nvlink_domain_size: int | None = None, network_gbps: float | None = None
) -> HierarchicalNetwork:
    """Collective times with efficiencies measured by Vidur where they exist (cached).

    Args:
        gpu: a device-table name or alias.
        nvlink_domain_size: GPUs per NVLink domain (``None``: the device table's).
        network_gbps: the cluster's scale-out bandwidth per GPU, one direction, GB/s
            (``None``: the device table's; a job's ``network_gbps`` names its cluster's).

    Returns:
        A :class:`NetworkModel`.

    Raises:
        UnknownDeviceError: the GPU is not in the device table.
        ValueError: no NVLink / NIC bandwidth or domain for the GPU in the table.
    """
    return _build(gpu, nvlink_domain_size, None, network_gbps)


@cache
def peak_network_model(
    gpu: str, nvlink_domain_size: int | None = None, network_gbps: float | None = None
) -> HierarchicalNetwork:
    """Collective times at the datasheet bandwidths, no latency (the analytical baseline).

    Args and errors as :func:`network_model`.
    """
    return _build(gpu, nvlink_domain_size, PEAK_NETWORK_FIT, network_gbps)


def _mre(predicted: np.ndarray, measured: np.ndarray) -> float:
    return float(np.mean(np.abs(predicted - measured) / measured))


def _alternate(order: np.ndarray) -> np.ndarray:
    """Fit mask: sizes sorted by ``order`` alternately to fit (even rank) and test (odd)."""
    rank = np.empty(len(order), dtype=int)
    rank[np.argsort(order, kind="stable")] = np.arange(len(order))
    return rank % 2 == 0


def _errors(predicted: np.ndarray, measured: np.ndarray, nbytes: np.ndarray) -> dict:
    big = nbytes >= 1 << 20
    return {
        "mre": _mre(predicted, measured),
        "mre_from_1MiB": _mre(predicted[big], measured[big]),
    }


def evaluate_network_model() -> pd.DataFrame:
    """Error of the fitted links on Vidur's measurements, in sample and held out.

    Held out: within each sweep, message sizes sorted and alternately assigned to fit and test
    (the rule of :func:`scaledl.external.vidur.split_by_message_size`). Sets: each DGX
    system's single-node all-reduce (2, 4, 8 GPUs: one link for all three sizes, as the model
    uses it) and send/recv, H100's two-node send/recv, and A100's two-node all-reduces (1, 2,
    4, 8 GPUs per node) predicted with the hierarchical bus bandwidth ``min(eff_nv B_nv, r *
    B_net, C_node)`` where that system's per-GPU network bandwidth ``B_net``, per-node cap
    ``C_node`` and latency are fitted (its network is not a DGX A100's; module docstring).

    Returns:
        One row per set: ``set``, ``n``, ``mre_in_sample``, ``mre_held_out``,
        ``mre_held_out_from_1MiB`` (messages of 1 MiB or more), ``efficiency`` (large-message
        regime, in sample), ``alpha_us``, and for the A100 two-node set only ``nic_gbps`` and
        ``node_nic_gbps`` (the fitted per-GPU and per-node network bandwidths; NaN elsewhere).
    """
    allreduce = load_vidur_allreduce()
    send_recv = load_vidur_send_recv()
    rows = []

    def add(name: str, nbytes, world, t, bandwidth: float, order) -> None:
        ring = 2.0 * (world - 1.0) / world * nbytes / bandwidth
        fit = fit_link(nbytes, world, t, bandwidth)
        train = _alternate(order)
        held = fit_link(nbytes[train], world[train], t[train], bandwidth)
        test = ~train
        rows.append(
            {
                "set": name,
                "n": len(t),
                "mre_in_sample": _mre(fit.seconds(ring, nbytes), t),
                "mre_held_out": _mre(held.seconds(ring[test], nbytes[test]), t[test]),
                "mre_held_out_from_1MiB": _errors(
                    held.seconds(ring[test], nbytes[test]), t[test], nbytes[test]
                )["mre_from_1MiB"],
                "efficiency": fit.efficiency,
                "alpha_us": fit.alpha_s * 1e6,
                "nic_gbps": math.nan,
            }
        )

    for system, device in SYSTEM_DEVICES.items():
        nvlink_bw, network_bw = _bandwidths(device)
        ar = allreduce[(allreduce["system"] == system) & (allreduce["num_nodes"] == 1)]
        nbytes = ar["allreduce_bytes"].to_numpy(float)
        world = ar["world_size"].to_numpy(float)
        t = ar["allreduce_ms"].to_numpy() * 1e-3
        add(f"{system} all_reduce 1 node", nbytes, world, t, nvlink_bw, world * 1e12 + nbytes)
        for nodes, bw in ((1, nvlink_bw), (2, network_bw)):
            sr = send_recv[(send_recv["system"] == system) & (send_recv["num_nodes"] == nodes)]
            if sr.empty:
                continue
            nbytes = sr["bytes"].to_numpy(float)
            t = sr["time_ms"].to_numpy() * 1e-3
            add(f"{system} send_recv {nodes} node(s)", nbytes, np.full(len(t), 2.0), t, bw, nbytes)
    # A100 two nodes: bus bandwidth min(eff_nv B_nv, r B_net, C_node); alpha, B_net and the
    # node's NIC cap C_node fitted (least squares on log time).
    nvlink_fit = measured_network_fit("a100").nvlink
    nvlink_bw, _ = _bandwidths(SYSTEM_DEVICES["a100_dgx"])
    ar = allreduce[(allreduce["system"] == "a100_dgx") & (allreduce["num_nodes"] == 2)]
    nbytes = ar["allreduce_bytes"].to_numpy(float)
    r = (ar["world_size"] / ar["num_nodes"]).to_numpy(float)
    ring_bytes = _ring_seconds(ar, 1.0)
    t = ar["allreduce_ms"].to_numpy() * 1e-3
    cap = nvlink_fit.efficiency * nvlink_bw

    def predict(theta: np.ndarray, mask: np.ndarray) -> np.ndarray:
        alpha, per_gpu, node = np.exp(theta)
        bus = np.minimum(np.minimum(cap, r[mask] * per_gpu), node)
        return alpha + ring_bytes[mask] / bus

    def fit(mask: np.ndarray) -> np.ndarray:
        start = np.log([1e-4, 5e9, 2e10])
        return least_squares(
            lambda theta: np.log(predict(theta, mask)) - np.log(t[mask]), start, method="lm"
        ).x

    everything = np.ones(len(t), dtype=bool)
    theta = fit(everything)
    train = _alternate(ar["world_size"].to_numpy() * 1e12 + nbytes)
    held = fit(train)
    test = ~train
    rows.append(
        {
            "set": "a100_dgx all_reduce 2 nodes (hierarchical)",
            "n": len(t),
            "mre_in_sample": _mre(predict(theta, everything), t),
            "mre_held_out": _mre(predict(held, test), t[test]),
            "mre_held_out_from_1MiB": _errors(predict(held, test), t[test], nbytes[test])[
                "mre_from_1MiB"
            ],
            "efficiency": math.nan,
            "alpha_us": math.exp(theta[0]) * 1e6,
            "nic_gbps": math.exp(theta[1]) / 1e9,
            "node_nic_gbps": math.exp(theta[2]) / 1e9,
        }
    )
    return pd.DataFrame(rows)
