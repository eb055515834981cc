"""The one dispatch point (pyg_tc.ops.dispatch): vocabulary, rules, fallbacks."""

import pytest
import torch

import pyg_tc
from pyg_tc.formats import CSRGraph
from pyg_tc.ops import dispatch

from ..conftest import DEVICES, features, make_graph


def _graph(device):
    ei, n = make_graph('hub', device)
    return CSRGraph.from_coo(ei[0], ei[1], n, n), n


@pytest.mark.parametrize('device', DEVICES)
def test_choice_per_call(device):
    g, n = _graph(device)
    x = features(n, 8, torch.float32, device)
    assert dispatch.choose('spmm', 'csr', g, x) == 'csr'
    assert dispatch.choose('spmm', 'reference', g, x) == 'reference'
    assert dispatch.choose('spmm', 'auto', g, x) == 'csr'  # no SGT attached: CSR
    assert dispatch.choose('spmm', 'sgt', g, x, 'mean') == 'sgt'
    with pytest.raises(ValueError, match='tensor-core SpMM supports'):
        dispatch.choose('spmm', 'sgt', g, x, 'max')
    assert dispatch.choose('spmm', 'sgt', g, x, 'max', strict=False) == 'csr'
    xk = pyg_tc.ops.maxk(x, 3)
    assert dispatch.choose('spmm', 'csr', g, xk) == 'cbsr'
    assert dispatch.choose('spmm', 'reference', g, xk) == 'cbsr_reference'
    with pytest.raises(ValueError, match='dense features'):
        dispatch.choose('spmm', 'sgt', g, xk)
    assert dispatch.choose('spmm', 'sgt', g, xk, strict=False) == 'cbsr'
    with pytest.raises(ValueError, match='backend must be one of'):
        dispatch.choose('spmm', 'cuda', g, x)
    if device == 'cuda' and pyg_tc._library.kernels_loaded():  # no fp64 kernel: the reference
        assert dispatch.choose('spmm', 'csr', g, x.double()) == 'reference'
        assert dispatch.choose('spmm', 'csr', g, pyg_tc.ops.maxk(x.double(), 3)) == 'cbsr_reference'


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('backend', ['csr', 'sgt', 'auto'])
def test_every_backend_matches_the_reference(backend, device):
    g, n = _graph(device)
    x = features(n, 13, torch.float32, device)
    w = torch.rand(g.num_edges, device=device)
    ref = dispatch.aggregate(g, x, w, 'mean', backend='reference')
    out = dispatch.aggregate(g, x, w, 'mean', backend=backend)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    a = features(n, 13, torch.float32, device, seed=3)
    torch.testing.assert_close(
        dispatch.edge_scores(g, a, x, backend), dispatch.edge_scores(g, a, x, 'reference'), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize('device', DEVICES)
def test_layers_pass_their_backend_down(device):
    ei, n = make_graph('random', device)
    x = features(n, 16, torch.float32, device)
    torch.manual_seed(0)
    ref = pyg_tc.nn.GCNConv(16, 8, backend='reference').to(device)
    conv = pyg_tc.nn.GCNConv(16, 8, backend='csr').to(device)
    conv.load_state_dict(ref.state_dict())
    torch.testing.assert_close(conv(x, ei), ref(x, ei), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match='backend must be one of'):
        pyg_tc.nn.SAGEConv(16, 8, backend='tcu')


# -- the CUDA choices, from the declared limits ------------------------------
# What choose() picks for a CUDA tensor, on any machine: a stand-in carries what
# choose() reads of a tensor (a CPU tensor that says it is on CUDA), and whether
# the kernels are loaded is set. The expected answers are the rules the modules applied
# themselves before the limits were declared (kernels loaded and not float64;
# the attention kernels' 2048-byte head; MaxK's 1024 columns; the SSpMM's
# atomics; the sampled kernel's conditions; AGNN's fused head limit).


class _CudaLike(torch.Tensor):
    """A CPU tensor that says it is on CUDA (all choose() asks)."""

    @property
    def is_cuda(self):
        return True


def _OnCuda(*shape: int, dtype: torch.dtype = torch.float32, requires_grad: bool = False) -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype).as_subclass(_CudaLike).requires_grad_(requires_grad)


@pytest.fixture
def kernels(monkeypatch):
    """``kernels(loaded)``: CUDA kernels loaded or not, as choose() sees them."""

    def set_loaded(loaded: bool = True):
        monkeypatch.setattr(dispatch, '_use_kernel', lambda t: t.is_cuda and t.dtype != torch.float64 and loaded)

    set_loaded(True)
    return set_loaded


@pytest.mark.parametrize(
    'C,H,dtype,expected',
    [
        (64, 2, torch.float32, 'csr'),
        (512, 1, torch.float32, 'csr'),
        (600, 2, torch.float32, 'reference'),
        (600, 1, torch.float16, 'csr'),
        (1024, 1, torch.bfloat16, 'csr'),
        (1025, 1, torch.float16, 'reference'),
        (130, 1, torch.float32, 'reference'),
        (132, 1, torch.float32, 'csr'),
        (8, 2, torch.float64, 'reference'),
    ],
)
@pytest.mark.parametrize('op', ['attention', 'attention_v2'])
def test_cuda_attention_head_limit(kernels, op, C, H, dtype, expected):
    g, n = _graph('cpu')
    x = _OnCuda(n, H, C, dtype=dtype)
    assert dispatch.choose(op, 'csr', g, x) == expected
    assert dispatch.choose(op, 'auto', g, x) == expected
    assert dispatch.choose(op, 'sgt', g, x, strict=False) == expected  # the layers: 'sgt' runs CSR
    with pytest.raises(ValueError, match="no 'sgt' implementation"):
        dispatch.choose(op, 'sgt', g, x)
    assert dispatch.choose(op, 'reference', g, x) == 'reference'
    kernels(False)
    assert dispatch.choose(op, 'csr', g, x) == 'reference'


@pytest.mark.parametrize(
    'F,dtype,expected',
    [
        (16, torch.float32, 'select'),
        (1024, torch.float16, 'select'),
        (1025, torch.float32, 'reference'),
        (16, torch.float64, 'reference'),
    ],
)
def test_cuda_maxk_width_limit(kernels, F, dtype, expected):
    x = _OnCuda(5, F, dtype=dtype)
    assert dispatch.choose('maxk', 'auto', None, x) == expected
    kernels(False)
    assert dispatch.choose('maxk', 'auto', None, x) == 'reference'
    assert dispatch.choose('maxk', 'auto', None, torch.randn(5, 2000)) == 'select'  # CPU: the op (its reference)


def test_cuda_sspmm_is_not_deterministic(kernels):
    grad = _OnCuda(5, 16)
    previous = torch.are_deterministic_algorithms_enabled()
    try:
        assert dispatch.choose('cbsr_sspmm', 'auto', None, grad) == 'cbsr'
        kernels(False)  # no kernel check: the op runs its reference on CUDA itself
        assert dispatch.choose('cbsr_sspmm', 'auto', None, grad) == 'cbsr'
        torch.use_deterministic_algorithms(True)
        assert dispatch.choose('cbsr_sspmm', 'auto', None, grad) == 'cbsr_reference'
        assert dispatch.choose('cbsr_sspmm', 'auto', None, torch.randn(5, 16)) == 'cbsr'  # CPU
    finally:
        torch.use_deterministic_algorithms(previous)


def test_cuda_sgt_cells_kernel_or_reference(kernels):
    g, n = _graph('cpu')
    for op in ('sgt_spmm_cells', 'sgt_sddmm_cells'):
        assert dispatch.choose(op, 'sgt', g, _OnCuda(n, 8)) == 'sgt'
        assert dispatch.choose(op, 'sgt', g, _OnCuda(n, 8, dtype=torch.float64)) == 'sgt_reference'
        assert dispatch.choose(op, 'sgt', g, features(n, 8, torch.float64, 'cpu')) == 'sgt'  # CPU: the op


def _sampled_args(x, S, seed=0):
    from pyg_tc.ops.es_spmm import Sampling

    return dict(x=x, spec=Sampling(S, 'uniform', seed), seed=seed, checked=dict(value=None, diag=None))


def test_cuda_sampled_aggregation_choice(kernels):
    g, n = _graph('cpu')
    S = 2
    assert g.max_degree() > S
    x = _OnCuda(n, 8)
    choose = lambda backend, a: dispatch.choose('sampled_spmm', backend, g, a['x'], args=a)
    assert choose('auto', _sampled_args(x, S)) == 'kernel'
    assert choose('csr', _sampled_args(x, S)) == 'kernel'
    assert choose('sgt', _sampled_args(x, S)) == 'capped'
    assert choose('reference', _sampled_args(x, S)) == 'capped'
    assert choose('auto', _sampled_args(_OnCuda(n, 8, requires_grad=True), S)) == 'capped'
    with torch.no_grad():
        assert choose('auto', _sampled_args(_OnCuda(n, 8, requires_grad=True), S)) == 'kernel'
    assert choose('auto', _sampled_args(_OnCuda(n, 8, dtype=torch.float64), S)) == 'capped'
    assert choose('auto', _sampled_args(features(n, 8, torch.float32, 'cpu'), S)) == 'capped'
    assert choose('auto', _sampled_args(x, g.max_degree())) == 'exact'
    assert choose('sgt', _sampled_args(x, g.max_degree())) == 'exact'
    g.cache.put(('capped', S, 'uniform'), (5, 'kept'))  # a capped graph kept for seed 5: used in preference
    assert choose('auto', _sampled_args(x, S, seed=5)) == 'capped'
    assert choose('auto', _sampled_args(x, S, seed=6)) == 'kernel'
    kernels(False)
    assert choose('auto', _sampled_args(x, S)) == 'capped'


@pytest.mark.parametrize(
    'F,dtype,fused',
    [
        (16, torch.float32, True),
        (512, torch.float32, True),
        (600, torch.float32, False),
        (1024, torch.float16, True),
        (256, torch.float64, True),
        (257, torch.float64, False),
    ],
)
def test_agnn_fused_or_unfused(kernels, F, dtype, fused):
    """On every device (the head limit of the fused kernel; 'sgt' unfused)."""
    pyg_tc.nn.AGNNConv  # (the layer module declares the family)
    for x in (_OnCuda(7, F, dtype=dtype), torch.zeros(7, F, dtype=dtype)):
        a = dict(heads=x.unsqueeze(1))
        for backend in ('auto', 'csr', 'reference'):
            assert dispatch.choose('agnn', backend, None, a['heads'], args=a) == ('fused' if fused else 'unfused')
        assert dispatch.choose('agnn', 'sgt', None, a['heads'], args=a) == 'unfused'
