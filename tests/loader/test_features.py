"""Half and fp8 feature storage of the GPU loaders: ``quantize_fp8``'s
power-of-two scales, the fp8 row gather (reference, and the kernel bit for
bit, ``cuda``), and ``NeighborLoader(feature_storage=...)`` batches against
the features rounded once."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data

from pyg_tc.loader import FeatureStorage, LinkNeighborLoader, NeighborLoader, quantize_fp8
from pyg_tc.ops.neighbor import FP8, gather_rows, gather_rows_scaled, gather_rows_scaled_reference

from ..conftest import DEVICES, cuda_only


def features(n: int = 90, width: int = 13, seed: int = 0) -> torch.Tensor:
    """Columns of magnitudes 1e-4 .. 1e4, an all-zero column and a column of
    one value (the quantizer's edge cases)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, width, generator=g) * torch.logspace(-4, 4, width)
    if width > 2:
        x[:, 1] = 0.0
        x[:, 2] = -3.0
    return x


@pytest.mark.parametrize('scale', ['column', 'tensor'])
def test_quantize_fp8_scales_are_powers_of_two_and_exact(scale):
    x = features()
    q, s = quantize_fp8(x, scale)
    assert q.dtype == FP8 and s.dtype == torch.float32 and s.shape == ((x.size(1),) if scale == 'column' else (1,))
    m, e = torch.frexp(s)
    assert torch.all(m == 0.5), 'every scale is a power of two'
    amax = x.abs().amax(0) if scale == 'column' else x.abs().amax().reshape(1)
    # the smallest power of two bringing the largest magnitude to <= 448 (1 for a zero column)
    assert torch.all(amax / s <= 448) and torch.all((amax == 0) | (amax / (s / 2) > 448))
    # q * s is exact in fp32 and bf16; q is x / s rounded to nearest e4m3
    deq = q.float() * s
    assert torch.equal(deq.bfloat16().float(), deq)
    assert torch.equal(q, (x / s).to(FP8))
    if scale == 'column':  # relative error of e4m3 (2^-4) above its subnormal range
        big = x.abs() >= s * 2.0**-6
        assert torch.all(((deq - x).abs() <= x.abs() * 2.0**-4)[big])
    assert torch.equal(q.float()[:, 1], torch.zeros(x.size(0)))


def test_quantize_fp8_errors():
    with pytest.raises(ValueError, match='inf or NaN'):
        quantize_fp8(torch.tensor([[1.0, float('inf')]]))
    with pytest.raises(ValueError, match='2-D floating'):
        quantize_fp8(torch.arange(6).view(2, 3))
    with pytest.raises(ValueError, match="'column' or 'tensor'"):
        quantize_fp8(torch.ones(2, 2), 'row')


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize('width', [1, 2, 7, 12, 100])
@pytest.mark.parametrize('scale', ['column', 'tensor'])
def test_gather_rows_scaled(device, dtype, width, scale):
    x = features(width=width)
    q, s = quantize_fp8(x, scale)
    idx = torch.tensor([0, 5, 5, 89, 3, 40], device=device)
    src = q.to(device) if device == 'cpu' else q.cuda()
    out = gather_rows_scaled(src, s.to(device), idx, dtype)
    assert out.dtype == dtype and out.device.type == device and out.shape == (6, width)
    want = (q[idx.cpu()].float() * s).to(dtype)  # one fp32 product, one rounding
    assert torch.equal(out.cpu(), want)
    assert torch.equal(gather_rows_scaled(src, s.to(device), idx[:0], dtype).cpu(), want[:0])


@cuda_only
@pytest.mark.parametrize('width', [3, 100])
def test_gather_rows_scaled_pinned_and_offset(width):
    """From pinned host memory over UVA, and from a view whose rows are not
    4-byte aligned (a slice of a larger matrix): the kernel's narrower loads."""
    x = features(width=width + 1)
    q, s = quantize_fp8(x)
    q = q[:, 1:].contiguous()
    s = s[1:].contiguous()
    idx = torch.randint(0, x.size(0), (333,), device='cuda')
    want = (q[idx.cpu()].float() * s).to(torch.bfloat16)
    out = gather_rows_scaled(q.pin_memory(), s.cuda(), idx, torch.bfloat16)
    assert torch.equal(out.cpu(), want)
    odd = torch.empty(q.numel() + 1, dtype=FP8, device='cuda')[1:].view(q.shape)
    odd.copy_(q.cuda())
    assert torch.equal(gather_rows_scaled(odd, s.cuda(), idx, torch.bfloat16).cpu(), want)


@cuda_only
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16, torch.float16, torch.uint8])
@pytest.mark.parametrize('width', [1, 5, 100, 257])
def test_gather_rows_many_rows(dtype, width):
    """More words than one pass of the grid (every word of the unrolled loop,
    and the tail of a partial one)."""
    x = (torch.randn(5000, width) * 50).to(dtype).cuda()
    idx = torch.randint(0, 5000, (40_001,), device='cuda')
    assert torch.equal(gather_rows(x, idx), x[idx])


@pytest.mark.parametrize('bad', ['dtype', 'scale', 'out'])
def test_gather_rows_scaled_errors(bad):
    q, s = quantize_fp8(features())
    idx = torch.tensor([0, 1])
    args = {'dtype': (q.float(), s, idx, torch.bfloat16), 'scale': (q, s[:3], idx, torch.bfloat16)}
    args['out'] = (q, s, idx, torch.int32)
    with pytest.raises((ValueError, RuntimeError)):
        gather_rows_scaled_reference(*args[bad])


def graph_data(n: int = 90, width: int = 13) -> Data:
    g = torch.Generator().manual_seed(1)
    return Data(
        x=features(n, width),
        edge_index=torch.randint(0, n, (2, 600), generator=g),
        y=torch.arange(n),
        h=torch.randn(n, 4, generator=g),
    )


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize(
    'storage',
    [
        torch.bfloat16,
        torch.float16,
        FeatureStorage(FP8),
        FeatureStorage(FP8, compute_dtype=torch.float32, scale='tensor'),
        FeatureStorage(torch.bfloat16, attrs=('x', 'h')),
    ],
    ids=['bf16', 'fp16', 'fp8', 'fp8-tensor-fp32', 'bf16-two-attrs'],
)
@pytest.mark.parametrize('where', ['host', 'device'])
def test_loader_feature_storage(device, storage, where):
    """The batch's stored attributes are the features rounded once to the
    storage (fp8: then exactly upcast), in the batch dtype; everything else
    (nodes, edges, other attributes) is the batch of the loader without it."""
    data = graph_data()
    if where == 'device':
        data = data.to(device)
    kw = dict(batch_size=16, shuffle=False, device=device)
    torch.manual_seed(0)
    plain = list(NeighborLoader(data, [4, 3], **kw))
    torch.manual_seed(0)
    ours = list(NeighborLoader(data, [4, 3], feature_storage=storage, **kw))
    st = storage if isinstance(storage, FeatureStorage) else FeatureStorage(storage)
    for a, b in zip(plain, ours):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index.as_tensor(), b.edge_index.as_tensor())
        assert torch.equal(a.y, b.y)
        for key in ('x', 'h'):
            full = data[key].cpu()
            if key not in st.attrs:
                assert torch.equal(a[key], b[key])
                continue
            assert b[key].dtype == st.batch_dtype and b[key].device == a[key].device
            if st.dtype == FP8:
                q, s = quantize_fp8(full, st.scale)
                want = (q.float() * s)[a.n_id.cpu()].to(st.batch_dtype)
            else:
                want = full[a.n_id.cpu()].to(st.dtype)
            assert torch.equal(b[key].cpu(), want)


@pytest.mark.parametrize('dtype', [None, torch.bfloat16, torch.float16])
@pytest.mark.parametrize('width', [8, 13])
def test_padded_rows_converts_in_slices(monkeypatch, dtype, width):
    """``padded_rows`` converts a slice of rows at a time (here 7 rows of the
    source per slice): the values are ``x`` in the dtype, the padding zero."""
    from pyg_tc.loader import features as F

    monkeypatch.setattr(F, '_SLICE_BYTES', 7 * width * 4)
    x = features(50, width)
    v = F.padded_rows(x, dtype=dtype)
    want = x if dtype is None else x.to(dtype)
    assert v.dtype == want.dtype and torch.equal(v, want)
    pitch = v.stride(0)
    assert (pitch * v.element_size()) % F.ROW_ALIGN == 0 and pitch >= width
    full = v.as_strided((50, pitch), (pitch, 1))
    assert torch.equal(full[:, width:], torch.zeros_like(full[:, width:]))


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('memory', ['auto', 'device', 'pinned'])
@pytest.mark.parametrize('where', ['host', 'device'])
@pytest.mark.parametrize('dtype', [torch.bfloat16, FP8])
def test_loader_feature_storage_memory(device, memory, where, dtype):
    """``FeatureStorage(memory=...)`` places the converted copy (a GPU
    loader: on the GPU for ``'device'``, or ``'auto'`` and features there;
    else pinned host memory; a CPU loader: on the CPU) and the batches are
    the same wherever it lies."""
    data = graph_data()
    if where == 'device':
        data = data.to(device)
    kw = dict(batch_size=16, shuffle=False, device=device)
    torch.manual_seed(0)
    loader = NeighborLoader(data, [4, 3], feature_storage=FeatureStorage(dtype, memory=memory), **kw)
    batches = list(loader)
    stored = loader._stored_features['x'][2]
    if dtype == FP8:
        stored, scale = stored
        assert scale.device == batches[0].n_id.device
    if device == 'cpu':
        assert stored.device.type == 'cpu' and not stored.is_pinned()
    elif memory == 'device' or (memory == 'auto' and where == 'device'):
        assert stored.is_cuda
    else:
        assert stored.device.type == 'cpu' and stored.is_pinned()
    want = data.x.cpu()
    if dtype == FP8:
        q, s = quantize_fp8(want)
        want = q.float() * s
    for b in batches:
        assert b.x.dtype == torch.bfloat16 and b.x.device == b.n_id.device
        assert torch.equal(b.x.cpu(), want[b.n_id.cpu()].bfloat16())


def test_loader_feature_storage_follows_in_place_changes():
    data = graph_data()
    loader = NeighborLoader(data, [2], batch_size=8, feature_storage=torch.bfloat16)
    first = next(iter(loader))  # (on the GPU where there is one: compared on the CPU)
    assert torch.equal(first.x.cpu(), data.x[first.n_id.cpu()].bfloat16())
    data.x.mul_(2)  # a new version: stored again
    second = next(iter(loader))
    assert torch.equal(second.x.cpu(), data.x[second.n_id.cpu()].bfloat16())
    assert not torch.equal(second.x.cpu(), (data.x[second.n_id.cpu()] / 2).bfloat16())


def test_link_loader_feature_storage():
    data = graph_data()
    loader = LinkNeighborLoader(
        data, [3], edge_label_index=data.edge_index[:, :20], batch_size=5, feature_storage=FeatureStorage(FP8)
    )
    b = next(iter(loader))
    q, s = quantize_fp8(data.x)
    assert b.x.dtype == torch.bfloat16 and torch.equal(b.x.cpu(), (q.float() * s)[b.n_id.cpu()].bfloat16())


def test_feature_storage_errors():
    data = graph_data()
    with pytest.raises(ValueError, match='dtype must be'):
        FeatureStorage(torch.float64)
    with pytest.raises(ValueError, match='compute_dtype'):
        FeatureStorage(torch.bfloat16, compute_dtype=torch.float32)
    with pytest.raises(ValueError, match='compute_dtype'):
        FeatureStorage(FP8, compute_dtype=torch.int8)
    with pytest.raises(ValueError, match='memory must be one of'):
        FeatureStorage(torch.bfloat16, memory='gpu')
    with pytest.raises(ValueError, match='not a node attribute'):
        NeighborLoader(data, [2], batch_size=8, feature_storage=FeatureStorage(torch.float16, attrs=('w',)))
    with pytest.raises(TypeError, match='torch.dtype or a FeatureStorage'):
        NeighborLoader(data, [2], batch_size=8, feature_storage='bf16')
    data.w = torch.arange(data.num_nodes)
    with pytest.raises(ValueError, match='2-D floating'):
        next(iter(NeighborLoader(data, [2], batch_size=8, feature_storage=FeatureStorage(torch.float16, attrs=('w',)))))


@cuda_only
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16, torch.float16, torch.uint8])
@pytest.mark.parametrize('width', [1, 3, 5, 100, 602])
@pytest.mark.parametrize('where', ['cuda', 'pinned'])
def test_gather_rows_of_padded_rows(dtype, width, where):
    """A row-padded view (``padded_rows``: rows at a pitch of 16 bytes on the
    GPU, 64 pinned; whole 16-byte words read, the row's bytes written) gives the rows of the unpadded matrix; so does a
    padded view whose last row's padding lies outside its storage (the
    narrower path)."""
    from pyg_tc.loader.features import padded_rows

    x = (torch.randn(3000, width) * 50).to(dtype)
    v = padded_rows(x.cuda() if where == 'cuda' else x, pin=where == 'pinned')
    align = 64 if where == 'pinned' else 16  # (PCIe reads 64-byte pieces)
    assert torch.equal(v.cpu(), x) and v.stride(0) * v.element_size() % align == 0
    idx = torch.randint(0, 3000, (20_001,), device='cuda')
    out = gather_rows(v, idx)
    assert out.is_contiguous() and torch.equal(out.cpu(), x[idx.cpu()])
    pitch = width + 16
    short = torch.zeros((3000 - 1) * pitch + width, dtype=dtype, device='cuda')
    view = short.as_strided((3000, width), (pitch, 1))
    view.copy_(x.cuda())
    assert torch.equal(gather_rows(view, idx), x.cuda()[idx])


@pytest.mark.parametrize('shape', [(0, 5), (4, 0), (0, 0)])
@pytest.mark.parametrize('scale', ['column', 'tensor'])
def test_quantize_fp8_empty(shape, scale):
    q, s = quantize_fp8(torch.zeros(shape), scale)
    assert q.shape == shape and torch.equal(s, torch.ones(shape[1] if scale == 'column' else 1))
