"""Every public module, class, function and method of pyg_tc has a docstring
(names without a leading underscore, defined in that module)."""

import importlib
import inspect
import pkgutil

import pyg_tc


def _public_modules():
    for m in pkgutil.walk_packages(pyg_tc.__path__, 'pyg_tc.'):
        if m.name.endswith('__main__') or any(p.startswith('_') for p in m.name.split('.')[1:]):
            continue
        yield importlib.import_module(m.name)


def _undocumented(mod):
    if not (mod.__doc__ or '').strip():
        yield mod.__name__
    for name, obj in vars(mod).items():
        if name.startswith('_') or getattr(obj, '__module__', None) != mod.__name__:
            continue
        if not (inspect.isfunction(obj) or inspect.isclass(obj)):
            continue
        if not (obj.__doc__ or '').strip():
            yield f'{mod.__name__}.{name}'
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                fn = member.fget if isinstance(member, property) else getattr(member, '__func__', member)
                own = inspect.isfunction(fn) and fn.__qualname__.startswith(f'{name}.')  # not PyG's
                if not attr.startswith('_') and own and not (fn.__doc__ or '').strip():
                    yield f'{mod.__name__}.{name}.{attr}'


def test_every_public_object_has_a_docstring():
    missing = [m for mod in _public_modules() for m in _undocumented(mod)]
    assert not missing, f'undocumented: {missing}'


def test_layers_follow_pygs_layout_with_backend():
    for cls in (pyg_tc.nn.GCNConv, pyg_tc.nn.SAGEConv, pyg_tc.nn.GINConv, pyg_tc.nn.AGNNConv):
        doc = cls.__doc__
        for section in ('Args:', 'Shapes:', 'backend (str, optional)', 'math::'):
            assert section in doc, f'{cls.__name__} doc lacks {section!r}'


#: public objects without a tensor going in or out (configuration, data objects, loaders,
#: transforms of ``Data``): ``Args:`` only
NO_TENSOR_IO = {
    'pyg_tc.ops.sgt_of',
    'pyg_tc.ops.choose_backend',
    'pyg_tc.ops.check_k',
    'pyg_tc.ops.ensure',
    'pyg_tc.ops.sampled_aggregation',
    'pyg_tc.transforms.DegreeBucketTransform',
    'pyg_tc.transforms.CBSRTransform',
    'pyg_tc.transforms.ReorderTransform',
    'pyg_tc.transforms.SGTTransform',
    'pyg_tc.transforms.CapNeighbors',
    'pyg_tc.loader.NeighborSampler',
    'pyg_tc.loader.NeighborLoader',
    'pyg_tc.loader.LinkNeighborLoader',
    'pyg_tc.transforms.PadToBuckets',
    'pyg_tc.transforms.Bucket',
    'pyg_tc.transforms.buckets_from_batches',
    'pyg_tc.transforms.buckets_from_fanouts',
    'pyg_tc.capture.CapturedStep',
    'pyg_tc.transforms.PadHops',
    'pyg_tc.transforms.HopBucket',
    'pyg_tc.transforms.HeteroBucket',
    'pyg_tc.transforms.HeteroHopBucket',
    'pyg_tc.transforms.PadGraphs',
    'pyg_tc.transforms.GraphBucket',
    'pyg_tc.transforms.graph_buckets',
    'pyg_tc.loader.GraphLoader',
    'pyg_tc.capture.padding',
    'pyg_tc.capture.padding_aware',
}


def test_public_api_documents_its_arguments_and_shapes():
    """Every public function and class of pyg_tc.ops, .nn, .transforms and
    .loader has an ``Args:`` section, and a ``Shapes:`` section where tensors
    go in or out."""
    missing = []
    for name in ('ops', 'nn', 'transforms', 'loader', 'capture'):
        mod = importlib.import_module(f'pyg_tc.{name}')
        for attr in mod.__all__:
            obj = getattr(mod, attr)
            if not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue
            doc, qual = inspect.getdoc(obj) or '', f'pyg_tc.{name}.{attr}'
            if 'Args:' not in doc:
                missing.append(f'{qual}: Args')
            if qual not in NO_TENSOR_IO and 'Shapes:' not in doc:
                missing.append(f'{qual}: Shapes')
    assert not missing, missing
