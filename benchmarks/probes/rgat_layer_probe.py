"""The R-GAT layer of MLPerf's GNN benchmark on sampled heterogeneous
batches: ``HeteroConv({edge type: GATConv((-1, -1), hidden // heads, heads,
add_self_loops=False)}, aggr='sum')``, PyG's layers against pyg_tc's (the
same weights), forward + backward per batch, on the batches of
``pyg_tc.loader.NeighborLoader`` over an IGBH-shaped graph
(``pyg_tc.bench.graphs.igbh_shaped``) with ``--width``-wide features.

Per precision (fp32; bf16 autocast): ms per batch of each layer (the mean
over ``--batches`` batches after a warm-up, synchronised at the ends) and
the ratio; the outputs are checked equal first (fp32, ``allclose``).

    python benchmarks/probes/rgat_layer_probe.py [--papers 200000] [--width 1024] [--out F] [--profile N]

``--profile N`` also prints each layer's N most expensive GPU kernels per
precision (``torch.profiler``, one batch after the timed ones) and its N
most expensive operators (their kernels included); ``--sync-debug`` prints
where pyg_tc's layer makes the host wait for the GPU (one batch under
``torch.cuda.set_sync_debug_mode('warn')``, each place once).
"""

import argparse
import json
import time

import torch
import torch_geometric.nn as pyg_nn

import pyg_tc.nn
from pyg_tc.loader import NeighborLoader

from pyg_tc.bench.graphs import igbh_shaped

DEV = torch.device('cuda' if torch.cuda.is_available() else 'cpu')


def hetero_gat(lib, edge_types, width: int, hidden: int, heads: int):
    convs = {e: lib.GATConv((width, width), hidden // heads, heads, add_self_loops=False) for e in edge_types}
    return lib.HeteroConv(convs, aggr='sum')


def _sync_sites(step, batch) -> None:
    """Runs ``step(batch)`` with torch's synchronisation warnings on and
    prints each distinct calling line once, with its count."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        torch.cuda.set_sync_debug_mode('warn')
        try:
            step(batch)
            torch.cuda.synchronize()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    sites = {}
    for w in caught:
        key = f'{w.filename}:{w.lineno}: {str(w.message)[:60]}'
        sites[key] = sites.get(key, 0) + 1
    print(f'--- synchronising calls: {len(caught)}', flush=True)
    for key, n in sites.items():
        print(f'{n} x {key}')


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--papers', type=int, default=200_000)
    p.add_argument('--width', type=int, default=1024)
    p.add_argument('--hidden', type=int, default=512)
    p.add_argument('--heads', type=int, default=4)
    p.add_argument('--fanout', default='15,10,5')
    p.add_argument('--batch-size', type=int, default=1024)
    p.add_argument('--batches', type=int, default=10)
    p.add_argument('--out', default='rgat_layer_probe.jsonl')
    p.add_argument('--profile', type=int, default=0, help='print the N most expensive kernels per layer')
    p.add_argument('--sync-debug', action='store_true', help="print where pyg_tc's layer waits for the GPU")
    a = p.parse_args()
    fan = [int(k) for k in a.fanout.split(',')]
    data = igbh_shaped(a.papers)
    g = torch.Generator().manual_seed(0)
    for t in data.node_types:
        data[t].x = torch.randn(data[t].num_nodes, a.width, generator=g)
    data = data.to(DEV)
    loader = NeighborLoader(data, fan, input_nodes=('paper', torch.arange(a.papers)), batch_size=a.batch_size)
    batches = [b for _, b in zip(range(a.batches + 1), loader)]
    torch.manual_seed(0)
    ref = hetero_gat(pyg_nn, data.edge_types, a.width, a.hidden, a.heads).to(DEV)
    ours = hetero_gat(pyg_tc.nn, data.edge_types, a.width, a.hidden, a.heads).to(DEV)
    ours.load_state_dict(ref.state_dict())
    b = batches[0]
    print('nodes per type:', {t: b[t].num_nodes for t in b.node_types}, flush=True)
    print('edges per type:', {e[1]: b[e].edge_index.size(1) for e in b.edge_types}, flush=True)
    with torch.no_grad():
        want, got = ref(b.x_dict, b.edge_index_dict), ours(b.x_dict, b.edge_index_dict)
    for t in want:
        torch.testing.assert_close(got[t], want[t], atol=1e-4, rtol=1e-4)
    sync = torch.cuda.synchronize if DEV.type == 'cuda' else (lambda: None)
    out = open(a.out, 'w')
    edges = sum(b[e].edge_index.size(1) for e in data.edge_types for b in batches[1:]) / a.batches
    for precision in ('fp32', 'bf16 autocast'):
        times = {}
        for impl, layer in (('PyG', ref), ('pyg_tc', ours)):
            amp = precision != 'fp32'

            def step(b):
                with torch.autocast(DEV.type, dtype=torch.bfloat16, enabled=amp):
                    res = layer(b.x_dict, b.edge_index_dict)
                sum(v.float().sum() for v in res.values()).backward()

            step(batches[0])
            sync()
            t0 = time.perf_counter()
            for b in batches[1:]:
                step(b)
            sync()
            times[impl] = 1e3 * (time.perf_counter() - t0) / a.batches
            if a.profile and DEV.type == 'cuda':
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                    step(batches[1])
                    sync()
                print(f'--- {impl}, {precision}: the {a.profile} most expensive kernels', flush=True)
                print(
                    prof.key_averages().table(sort_by='cuda_time_total', row_limit=a.profile, max_name_column_width=70)
                )
                with torch.profiler.profile(
                    activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
                ) as prof:
                    step(batches[1])
                    sync()
                print(f'--- {impl}, {precision}: the {a.profile} most expensive operators', flush=True)
                print(
                    prof.key_averages().table(
                        sort_by='device_time_total', row_limit=a.profile, max_name_column_width=50
                    )
                )
            if a.sync_debug and impl == 'pyg_tc' and DEV.type == 'cuda':
                _sync_sites(step, batches[1])
        rec = dict(
            papers=a.papers,
            width=a.width,
            hidden=a.hidden,
            heads=a.heads,
            edge_types=len(data.edge_types),
            edges_per_batch=edges,
            precision=precision,
            pyg_ms=times['PyG'],
            pyg_tc_ms=times['pyg_tc'],
            x_pyg=times['PyG'] / times['pyg_tc'],
            device=str(DEV),
        )
        out.write(json.dumps(rec) + '\n')
        print(
            f"{precision}: PyG {times['PyG']:.2f} ms, pyg_tc {times['pyg_tc']:.2f} ms per batch "
            f"({rec['x_pyg']:.2f}x; {edges:,.0f} edges, {len(data.edge_types)} edge types)",
            flush=True,
        )


if __name__ == '__main__':
    main()
