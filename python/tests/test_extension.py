"""Tests of <tensordict/python.hpp>: a torch extension (python/tests/extension/ext.cpp) built with
torch.utils.cpp_extension on the installed torch, called from Python with TensorDicts and
tensorclasses. Every conversion is checked both ways, through tensordict's own storage (the fast
path) and through its public API. Run with pytest, or as a script (CTest does:
`test_extension.py BUILD_DIR`); exits 77 (skipped) without torch, tensordict or a compiler."""

import os
import sys
import threading
import time

try:
    import torch
    from tensordict import (
        LazyStackedTensorDict,
        MetaData,
        NonTensorData,
        NonTensorStack,
        TensorDict,
        tensorclass,
    )
    from torch.utils import cpp_extension
except ImportError as e:  # CTest reads 77 as a skip
    print(f"skipped: {e}")
    sys.exit(77)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def build(name, source, build_dir, opt="-O1"):
    """Builds one extension source against the installed torch, as a user's setup would."""
    os.makedirs(build_dir, exist_ok=True)
    return cpp_extension.load(
        name=name,
        sources=[source],
        extra_include_paths=[os.path.join(ROOT, "include")],
        build_directory=build_dir,
        extra_cflags=[opt],
        verbose=False,
    )


_ext = None


def ext():
    global _ext
    if _ext is None:
        build_dir = os.environ.get("TENSORDICT_EXT_BUILD") or os.path.join(ROOT, "build", "python_ext")
        _ext = build("tensordict_test_ext", os.path.join(ROOT, "python", "tests", "extension", "ext.cpp"), build_dir)
    return _ext


@tensorclass
class Sample:
    obs: torch.Tensor
    reward: torch.Tensor
    tag: str = "train"


@tensorclass
class Other:
    obs: torch.Tensor
    reward: torch.Tensor
    tag: str = "train"


def both_paths(test):
    """Runs `test` with tensordict's storage read directly and again through its public API."""

    def run():
        m = ext()
        for fast in (True, False):
            m.set_fast_path(fast)
            assert m.fast_path() == fast, "tensordict 0.15's storage should be recognised"
            try:
                test(m)
            except AssertionError as e:
                raise AssertionError(f"{'fast' if fast else 'public API'} path: {e}") from e
        m.set_fast_path(True)

    run.__name__ = test.__name__
    return run


def same_tree(a, b, path=()):
    """The same keys, batch sizes, names, device, lock; tensors the same objects or equal."""
    assert type(a) is type(b), f"{path}: {type(a)} vs {type(b)}"
    assert a.batch_size == b.batch_size, f"{path}: {a.batch_size} vs {b.batch_size}"
    assert a.device == b.device, f"{path}: {a.device} vs {b.device}"
    assert list(a.keys()) == list(b.keys()), f"{path}: {list(a.keys())} vs {list(b.keys())}"
    assert a.is_locked == b.is_locked, f"{path}: locked {a.is_locked} vs {b.is_locked}"
    if isinstance(a, TensorDict):
        assert a.names == b.names, f"{path}: {a.names} vs {b.names}"
    for k in a.keys():
        x, y = a._get_str(k, None), b._get_str(k, None)
        if isinstance(x, torch.Tensor):
            assert x is y or (x.dtype == y.dtype and torch.equal(x, y)), f"{path + (k,)}: tensors differ"
        elif isinstance(x, NonTensorStack):
            assert isinstance(y, NonTensorStack) and x.tolist() == y.tolist(), f"{path + (k,)}"
        elif isinstance(x, (NonTensorData, MetaData)):
            assert type(x) is type(y) and x.data == y.data, f"{path + (k,)}: {x.data!r} vs {y.data!r}"
        else:
            same_tree(x, y, path + (k,))


DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
          torch.int8, torch.uint8, torch.bool, torch.complex64]


def random_tree(seed):
    """A TensorDict of random structure: depth, batch size, names, dtypes, key names, values."""
    g = torch.Generator().manual_seed(seed)
    r = lambda n: int(torch.randint(0, n, (1,), generator=g))  # noqa: E731
    batch = [r(4) + 1 for _ in range(r(3))]
    names = None
    if batch and r(2):
        names = [f"d{i}" if r(3) else None for i in range(len(batch))]
        if all(n is None for n in names):
            names[0] = "d0"
    keys = ["obs", "a.b", "with space", "ünïcödé", "0", "_x", "next", "x" * 40]

    def level(depth, bs):
        d = {}
        for i in range(r(5) + 1):
            key = keys[r(len(keys))] + (str(i) if r(2) else "")
            kind = r(6 if depth < 3 else 4)
            if kind <= 2:
                dt = DTYPES[r(len(DTYPES))]
                shape = bs + [r(3) + 1 for _ in range(r(3))]
                d[key] = (torch.randn(shape, generator=g) * 10).to(dt)
            elif kind == 3:
                values = ["s", 3, 2.5, True, None, [1, "a"], {"k": [1, 2]}, 2**70]
                d[key] = NonTensorData(values[r(len(values))], batch_size=bs)
            else:
                extra = [r(3) + 1] if r(2) else []
                d[key] = TensorDict(level(depth + 1, bs + extra), batch_size=bs + extra)
        return d

    td = TensorDict(level(0, batch), batch_size=batch)
    if names is not None:
        td.names = names
    if r(3) == 0:
        td.lock_()
    return td


@both_paths
def test_tensordict_round_trip(m):
    for seed in range(60):
        td = random_tree(seed)
        back = m.identity(td)
        same_tree(td, back)
        assert back is not td


@both_paths
def test_levels_with_the_same_keys_share_names_and_stay_right(m):
    # Levels whose keys C++ has seen before share its table of names; every way of breaking
    # that sharing must still give the right tree or the same error as the first time.
    def make(n, batch=(3,), extra=None):
        d = {f"k{i}": torch.full((*batch, 2), float(i)) for i in range(n)}
        if extra is not None:
            d["sub"] = TensorDict(extra, batch_size=list(batch))
        return TensorDict(d, batch_size=list(batch))

    for rep in range(3):  # first read keeps the table, the next ones share it
        td = make(4, extra={"a": torch.zeros(3), "b": torch.ones(3, 5)})
        same_tree(td, m.identity(td))
        same_tree(td, m.identity(td.clone()))  # equal keys, the same str objects
    # Equal keys built as new str objects, in another order, a prefix and a superset.
    fresh = TensorDict({"".join(["k", str(i)]): torch.zeros(3) for i in range(4)}, batch_size=[3])
    same_tree(fresh, m.identity(fresh))
    for keys in (["k1", "k0", "k2", "k3"], ["k0", "k1", "k2"], ["k0", "k1", "k2", "k3", "k4"]):
        t = TensorDict({k: torch.rand(3) for k in keys}, batch_size=[3])
        back = m.identity(t)
        assert list(back.keys()) == keys
        same_tree(t, back)
    # C++ adding a key to a level of shared keys changes only its own.
    td = make(4, batch=(1,))
    m.identity(td)
    grown = m.set_new(td)
    assert list(grown.keys()) == [f"k{i}" for i in range(4)] + ["new"] and "new" not in td.keys()
    assert list(m.identity(td).keys()) == [f"k{i}" for i in range(4)]
    assert list(m.identity(grown).keys()) == [f"k{i}" for i in range(4)] + ["new"]
    # A level of known keys whose entries do not fit: the same error every time.
    bad = make(4)
    bad._tensordict["k2"] = torch.zeros(7)  # storage written behind tensordict's back
    for _ in range(2):
        try:
            m.identity(bad)
            raise AssertionError("a leaf outside the batch size was taken")
        except ValueError as e:
            assert "k2" in str(e), str(e)
    # A nested level of a shorter batch size, and non-tensor entries, under known keys.
    mixed = TensorDict(k0=torch.zeros(3), k1=torch.zeros(3), k2=torch.zeros(3), k3=NonTensorData("x", batch_size=[3]),
                       batch_size=[3])
    for _ in range(2):
        back = m.identity(mixed)
        assert back["k3"] == "x"
    # More key sets than C++ keeps: still right.
    for i in range(1100):
        t = TensorDict({f"only{i}": torch.zeros(1)}, batch_size=[1])
        assert list(m.identity(t).keys()) == [f"only{i}"]
    same_tree(td, m.identity(td))


@both_paths
def test_tensors_are_shared_not_copied(m):
    x = torch.zeros(3, 2)
    td = TensorDict(x=x, nested=TensorDict(y=x, batch_size=[3]), batch_size=[3])
    back = m.identity(td)
    assert back["x"] is x and back["nested", "y"] is x
    assert back["x"].data_ptr() == x.data_ptr()


@both_paths
def test_what_cpp_sees(m):
    td = TensorDict(obs=torch.zeros(2, 3), sub=TensorDict(w=torch.ones(2, 3, 4), batch_size=[2, 3]),
                    mode=NonTensorData("greedy", batch_size=[2]), batch_size=[2], names=["env"])
    td.lock_()
    assert m.describe(td) == ("batch=[2] device=none locked=1 names=[env,] 'obs':a tensor[2, 3] "
                              "'sub':a TensorDict ('sub', 'w'):a tensor[2, 3, 4] "
                              "'mode':non-tensor data=\"greedy\"")
    stacked = torch.stack([TensorDict(a=torch.zeros(2), s="x"), TensorDict(a=torch.ones(2), s="y")])
    assert "'s':a non-tensor stack=[\"x\",\"y\"]" in m.describe(stacked)
    meta = TensorDict(act=MetaData("relu", batch_size=[3]), batch_size=[3])
    assert m.describe(meta).endswith("'act':non-tensor data=\"relu\"(meta)")


@both_paths
def test_made_in_cpp(m):
    c = m.made_in_cpp()
    assert type(c) is TensorDict and c.batch_size == torch.Size([2, 3])
    assert c.names == ["env", None] and c.is_locked
    assert c["mode"] == "greedy" and c["act"] == "relu" and isinstance(c._get_str("act", None), MetaData)
    assert c["big"] == 2**70
    assert c.get("tags").tolist() == [["a", "b", "c"], ["d", "e", "f"]]
    assert torch.equal(c["obs"], torch.arange(6.0).reshape(2, 3))
    assert c["nested"].batch_size == torch.Size([2, 3]) and c["nested", "w"].shape == (2, 3, 4)
    # A nested TensorDict carries its parent's dim names, as Python's do.
    assert c["nested"].names == ["env", None], c["nested"].names
    deeper = m.nested_names()
    assert deeper.names == ["env"] and deeper["a"].names == ["env", None]
    assert deeper["a", "b"].names == ["env", None, None] and deeper["own"].names == ["env", "agent"]
    # Python's own operations work on it.
    assert c.clone()["nested", "w"].sum() == 24 and c[1]["obs"].tolist() == [3.0, 4.0, 5.0]
    same_tree(c, m.identity(c))


@both_paths
def test_dicts_and_tensorclasses_where_a_tensordict_is_expected(m):
    back = m.identity({"a": torch.zeros(2), "b": {"c": torch.ones(1)}})
    assert type(back) is TensorDict and back["b", "c"].tolist() == [1.0]
    s = Sample(obs=torch.zeros(4, 3), reward=torch.ones(4), batch_size=[4])
    back = m.identity(s)
    assert type(back) is TensorDict and back["tag"] == "train" and back["obs"] is s.obs


@both_paths
def test_dicts_are_read_as_tensordict_reads_them(m):
    # Lists become tensors or non-tensor data, None non-tensor data, as TensorDict(dict) has them;
    # a key that is not a string is its KeyError.
    for d in ({"a": [1, 2]}, {"a": None}, {"a": {"b": [1.5]}}, {}):
        same_tree(m.identity(d), TensorDict(d))
    # A NonTensorStack with more dims than its level (of batch size []) is one list in C++.
    back = m.identity({"a": [[1], "x"]})
    assert back["a"] == [[1], "x"] and type(back._get_str("a", None)) is NonTensorData
    lin = m.lin_id({"weight": [1.0], "bias": [2.0], "activation": "relu"})
    assert type(lin) is m.Lin and lin.weight.tolist() == [1.0]
    for bad in ({1: torch.zeros(1)}, {"a": [1, 2], 3: 4}):
        try:
            m.identity(bad)
            raise AssertionError(f"{bad} was taken")
        except KeyError as e:
            assert "NestedKeys" in str(e)
    try:
        m.lin_id({"a": [1, 2]})
        raise AssertionError("a dict without the struct's keys was taken")
    except KeyError as e:
        assert "missing 'weight', 'bias', 'activation'; unexpected 'a'" in str(e)


@both_paths
def test_lazy_stacks(m):
    ragged = LazyStackedTensorDict.lazy_stack([TensorDict(a=torch.zeros(2)), TensorDict(a=torch.ones(3))])
    assert m.lazy_sizes(ragged) == [2]
    back = m.identity_lazy(ragged)
    assert isinstance(back, LazyStackedTensorDict)
    assert [t["a"].shape[0] for t in back.tensordicts] == [2, 3]
    try:
        m.identity(ragged)
        raise AssertionError("a ragged lazy stack was taken as a TensorDict")
    except ValueError as e:
        assert "lazy stack" in str(e) and "LazyStack<TensorDict>" in str(e)
    dense = LazyStackedTensorDict.lazy_stack([TensorDict(a=torch.zeros(2)), TensorDict(a=torch.ones(2))], dim=0)
    back = m.identity(dense)
    assert type(back) is TensorDict and back["a"].tolist() == [[0, 0], [1, 1]]


@both_paths
def test_structs_as_tensorclasses(m):
    lin = m.Lin(weight=torch.randn(3, 2), bias=torch.randn(3), batch_size=[])
    assert lin.activation == "relu"  # the default of the C++ member
    back = m.lin_id(lin)
    assert type(back) is m.Lin and back.weight is lin.weight and back.activation == "relu"
    made = m.lin_default()
    assert type(made) is m.Lin and made.activation == "tanh" and made.weight.shape == (2, 3)
    blk = m.Block(attn=m.Lin(weight=torch.ones(2, 2), bias=torch.zeros(2), batch_size=[]),
                  mlp=m.Lin(weight=torch.ones(2, 2), bias=torch.zeros(2), activation="gelu", batch_size=[]),
                  batch_size=[])
    assert blk.heads == 4
    model = m.Model(embed=torch.randn(5, 2), blocks=TensorDict({"0": blk, "1": blk.clone()}),
                    adapters=TensorDict(q=m.Lin(weight=torch.ones(1, 1), bias=torch.ones(1), batch_size=[])),
                    batch_size=[])
    assert model.head is None and model.scale == 1.0
    back = m.model_id(model)
    assert type(back) is m.Model and type(back.blocks["1"]) is m.Block and type(back.blocks["1"].mlp) is m.Lin
    assert back.blocks["0"].mlp.activation == "gelu" and back.blocks["0"].heads == 4
    assert type(back.adapters["q"]) is m.Lin and back.head is None and back.scale == 1.0
    assert back.blocks["0"].attn.weight is blk.attn.weight
    assert m.model_keys(model) == [
        "'embed'", "('blocks', '0', 'attn', 'weight')", "('blocks', '0', 'attn', 'bias')",
        "('blocks', '0', 'attn', 'activation')", "('blocks', '0', 'mlp', 'weight')",
        "('blocks', '0', 'mlp', 'bias')", "('blocks', '0', 'mlp', 'activation')", "('blocks', '0', 'heads')",
        "('blocks', '1', 'attn', 'weight')", "('blocks', '1', 'attn', 'bias')",
        "('blocks', '1', 'attn', 'activation')", "('blocks', '1', 'mlp', 'weight')",
        "('blocks', '1', 'mlp', 'bias')", "('blocks', '1', 'mlp', 'activation')", "('blocks', '1', 'heads')",
        "('adapters', 'q', 'weight')", "('adapters', 'q', 'bias')", "('adapters', 'q', 'activation')",
        "'scale'"]
    with_head = model.clone()
    with_head.head = m.Lin(weight=torch.ones(4, 2), bias=torch.ones(4), batch_size=[])
    scaled = m.model_scale(with_head, 3.0)
    assert type(scaled.head) is m.Lin and scaled.head.weight.sum() == 24
    assert torch.equal(scaled.embed, model.embed * 3)
    # A TensorDict (or dict) with the struct's keys is accepted where the struct is expected.
    back = m.lin_id(TensorDict(weight=torch.ones(1, 1), bias=torch.ones(1), activation="tanh"))
    assert type(back) is m.Lin and back.activation == "tanh"
    back = m.lin_id({"weight": torch.ones(1, 1), "bias": torch.ones(1), "activation": "relu"})
    assert type(back) is m.Lin
    # Batch sizes and optional leaves.
    b = m.Batched(x=torch.zeros(3, 2), batch_size=[3])
    back = m.batched_id(b)
    assert back.batch_size == torch.Size([3]) and back.mask is None and back.flag is False
    b.mask = torch.ones(3, dtype=torch.bool)
    assert m.batched_id(b).mask.dtype == torch.bool


@both_paths
def test_structs_of_many_shapes_and_values(m):
    # Random blocks (nested tensorclasses, static fields of several values) through the struct
    # conversions: the direct one (fast path) and the general one must give the same.
    g = torch.Generator().manual_seed(1)
    acts = ["relu", "", "ünïcödé", "x" * 100, "a\"b", "tanh"]
    for seed in range(40):
        r = lambda n: int(torch.randint(0, n, (1,), generator=g))  # noqa: E731
        dt = DTYPES[r(len(DTYPES))]
        lins = [m.Lin(weight=(torch.randn(r(4) + 1, r(4) + 1, generator=g) * 5).to(dt),
                      bias=torch.randn(r(5), generator=g).to(dt), activation=acts[r(len(acts))], batch_size=[])
                for _ in range(2)]
        blk = m.Block(attn=lins[0], mlp=lins[1], heads=r(1000) - 500, batch_size=[])
        back = m.block_id(blk)
        assert type(back) is m.Block and type(back.attn) is m.Lin and type(back.mlp) is m.Lin
        assert back.heads == blk.heads and type(back.heads) is int
        for a, b in ((back.attn, blk.attn), (back.mlp, blk.mlp)):
            assert a.weight is b.weight and a.bias is b.bias and a.activation == b.activation
        n = r(4) + 1
        bt = m.Batched(x=torch.randn(n, r(3) + 1, generator=g), batch_size=[n], flag=bool(r(2)))
        if r(2):
            bt.mask = torch.rand(n, generator=g) > 0.5
        back = m.batched_id(bt)
        assert back.batch_size == bt.batch_size and back.flag == bt.flag and back.x is bt.x
        assert (back.mask is None) == (bt.mask is None)
    try:
        m.bad_batched()
        raise AssertionError("a leaf that does not start with the batch size crossed")
    except ValueError as e:
        assert "'x'" in str(e) and "batch size [3]" in str(e)
    # A tensorclass whose class keeps a value outside its TensorDict takes the general path.
    lin = m.Lin(weight=torch.ones(1, 1), bias=torch.ones(1), batch_size=[])
    lin._non_tensordict["activation"] = "gelu"
    del lin._tensordict["activation"]
    assert m.lin_id(lin).activation == "gelu"


@both_paths
def test_a_tensorclass_defined_in_python(m):
    m.register_sample(Sample)
    s = Sample(obs=torch.zeros(4, 3), reward=torch.ones(4), tag="eval", batch_size=[4])
    back = m.sample_id(s)
    assert type(back) is Sample and back.tag == "eval" and back.obs is s.obs
    assert back.batch_size == torch.Size([])  # the C++ struct has no batch size
    try:
        m.sample_id(Other(obs=torch.zeros(1), reward=torch.zeros(1), batch_size=[]))
        raise AssertionError("a tensorclass of another class was accepted")
    except TypeError as e:
        assert "expected a Sample" in str(e) and "Other" in str(e)
    # A struct with no class of its own: a tensorclass of another class whose fields do not fit
    # is an object of the wrong kind (TypeError); a TensorDict with the wrong keys a KeyError.
    try:
        m.unregistered_sum(s)
        raise AssertionError("a Sample was taken for an Unregistered")
    except TypeError as e:
        assert "expected a Unregistered" in str(e) and "got a Sample" in str(e) and "weight" in str(e), str(e)
    try:
        m.unregistered_sum(TensorDict(obs=torch.zeros(1)))
        raise AssertionError("a TensorDict without the struct's keys was taken")
    except KeyError as e:
        assert "weight" in str(e)

    @tensorclass
    class Fits:
        weight: torch.Tensor
        bias: torch.Tensor

    assert float(m.unregistered_sum(Fits(weight=torch.ones(2), bias=torch.ones(1), batch_size=[]))) == 3.0
    # A class with a __post_init__ is built through _from_tensordict, which runs it.
    seen = []

    @tensorclass
    class Checked:
        obs: torch.Tensor
        reward: torch.Tensor
        tag: str = "train"

        def __post_init__(self):
            seen.append(self.tag)

    m.register_sample(Checked)
    try:
        back = m.sample_id(Checked(obs=torch.zeros(2), reward=torch.ones(2), tag="t", batch_size=[]))
        assert type(back) is Checked and back.tag == "t" and seen == ["t", "t"]
    finally:
        m.register_sample(Sample)


def test_a_struct_bound_with_class_keeps_pybind11s_conversion():
    m = ext()
    b = m.Bound()
    b.w = torch.ones(3)
    assert float(m.bound_sum(b)) == 3.0
    try:
        m.bound_sum(TensorDict(w=torch.ones(3)))
        raise AssertionError("a TensorDict was taken for a struct bound with py::class_")
    except TypeError as e:
        assert "incompatible function arguments" in str(e)


def test_registering_a_class_that_does_not_fit():
    m = ext()
    try:
        m.register_sample(int)
        raise AssertionError("int was registered as a tensorclass")
    except TypeError as e:
        assert "not a tensorclass" in str(e)

    @tensorclass
    class Fewer:
        obs: torch.Tensor

    try:
        m.register_sample(Fewer)
        raise AssertionError("a class without the struct's fields was registered")
    except TypeError as e:
        assert "reward" in str(e) and "tag" in str(e)


@both_paths
def test_errors_are_python_exceptions(m):
    td = TensorDict(a=torch.zeros(3), batch_size=[3])
    cases = [
        (lambda: m.identity(None), TypeError, "incompatible function arguments"),
        (lambda: m.identity(3), TypeError, "incompatible function arguments"),
        (lambda: m.identity(torch.zeros(2)), TypeError, "incompatible function arguments"),
        (lambda: m.get(td, "zz"), KeyError, "'zz'"),
        (lambda: m.set_new(td.clone().lock_()), RuntimeError, "locked"),
        (lambda: m.index(td, 7), IndexError, "7"),
        (lambda: m.wrong_shape(td), ValueError, "'bad'"),
        (lambda: m.lin_id(TensorDict(weight=torch.zeros(1))), KeyError, "'bias'"),
        (lambda: m.lin_id(TensorDict(weight=torch.zeros(1), bias=torch.zeros(1), activation=3)),
         ValueError, "'activation'"),
        (lambda: m.lin_id(TensorDict(weight=torch.zeros(1), bias=torch.zeros(1), extra=torch.zeros(1))),
         KeyError, "'extra'"),
        (lambda: m.lin_id(TensorDict(weight=torch.zeros(1), bias=TensorDict(), activation="relu")),
         ValueError, "'bias'"),
        (lambda: m.identity(TensorDict(o=NonTensorData(object()))), TypeError, "'o'"),
        (lambda: m.identity(TensorDict(o=NonTensorData({1: 2}))), TypeError, "'o'"),
        (lambda: m.lin_id(None), TypeError, "incompatible function arguments"),
    ]
    for f, kind, text in cases:
        try:
            f()
        except kind as e:
            assert text in str(e), f"{kind.__name__} without {text!r}: {e}"
        else:
            raise AssertionError(f"no {kind.__name__} ({text})")
    chain = TensorDict(a=torch.zeros(1))
    for _ in range(3000):
        chain = TensorDict(n=chain)
    try:
        m.identity(chain)
        raise AssertionError("a chain of 3000 nested TensorDicts was taken")
    except ValueError as e:
        assert "nested more than 1000 levels" in str(e)
    bad_names = TensorDict(a=torch.zeros(2), batch_size=[2])
    bad_names._td_dim_names = [3]  # storage another library wrote wrong
    if m.fast_path():
        try:
            m.identity(bad_names)
            raise AssertionError("a dim name that is not a str was taken")
        except TypeError as e:
            assert "dim name" in str(e)
    deep = []
    for _ in range(1000):
        deep = [deep]
    try:
        m.identity(TensorDict(o=NonTensorData(deep)))
        raise AssertionError("a value nested 1000 deep was taken")
    except ValueError as e:
        assert "nested more than" in str(e)


@both_paths
def test_other_devices(m):
    td = TensorDict(a=torch.zeros(3, device="meta"), batch_size=[3], device="meta")
    back = m.identity(td)
    assert back.device == torch.device("meta") and back["a"].device.type == "meta"


@both_paths
def test_autograd_crosses(m):
    w = torch.randn(3, dtype=torch.double, requires_grad=True)
    x = torch.randn(3, dtype=torch.double, requires_grad=True)
    b = torch.randn(3, dtype=torch.double, requires_grad=True)

    def f(w, x, b):
        return m.affine(TensorDict(w=w, x=x, b=b, batch_size=[3]))["y"]

    assert torch.autograd.gradcheck(f, (w, x, b))
    lin = m.Lin(weight=torch.randn(2, 3, dtype=torch.double, requires_grad=True),
                bias=torch.randn(2, dtype=torch.double, requires_grad=True), batch_size=[])
    inp = torch.randn(4, 3, dtype=torch.double)
    assert torch.autograd.gradcheck(lambda W, B: m.lin_forward(m.Lin(weight=W, bias=B, batch_size=[]), inp),
                                    (lin.weight, lin.bias))
    out = m.lin_id(lin)
    assert out.weight.requires_grad and out.weight is lin.weight
    y = m.affine(TensorDict(w=w, x=x, b=b))["y"]
    assert y.grad_fn is not None
    y.sum().backward()
    assert torch.allclose(w.grad, x.detach())


def test_threads_run_at_once_without_the_gil():
    m = ext()
    td = TensorDict(a=torch.ones(10), b=TensorDict(c=torch.ones(5)), batch_size=[])
    results = []
    start = time.perf_counter()
    threads = [threading.Thread(target=lambda: results.append(m.slow_sum(td, 300))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    assert [float(r) for r in results] == [15.0] * 4
    # Four 300 ms calls holding the GIL would take 1.2 s.
    assert elapsed < 1.0, f"four calls took {elapsed:.2f} s: the GIL was held"
    # Conversions from many threads at once (each holding the GIL while it converts).
    errors = []

    def convert():
        try:
            for seed in range(20):
                t = random_tree(seed)
                same_tree(t, m.identity(t))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=convert) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def main():
    global _ext
    if len(sys.argv) > 1:
        os.environ["TENSORDICT_EXT_BUILD"] = sys.argv[1]
    try:
        cpp_extension.verify_ninja_availability()
    except RuntimeError as e:
        print(f"skipped: {e}")
        sys.exit(77)
    ext()
    tests = [v for k, v in sorted(globals().items()) if k.startswith("test_") and callable(v)]
    for t in tests:
        t()
        print(f"ok {t.__name__}")
    print(f"{len(tests)} passed")


if __name__ == "__main__":
    main()
