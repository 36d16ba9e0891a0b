"""Tests of tensordict_cpp.export: TensorDict and tensorclass pytree nodes serialize with the
context the C++ side reads, and load back in Python. Run with pytest, or as a script."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

try:
    import torch
    import torch.utils._pytree as pytree
    from tensordict import TensorDict, tensorclass
except ImportError as e:  # CTest reads 77 as a skip
    print(f"skipped: {e}")
    sys.exit(77)

import tensordict_cpp  # noqa: E402


@tensorclass
class Sample:
    obs: torch.Tensor
    reward: torch.Tensor
    tag: str = "train"


tensordict_cpp.register_export_types()


def roundtrip(tree):
    spec = pytree.tree_structure(tree)
    text = pytree.treespec_dumps(spec)
    back = pytree.treespec_loads(text)
    leaves = pytree.tree_leaves(tree)
    return json.loads(text), pytree.tree_unflatten(leaves, back)


def context(node):
    return json.loads(node["context"])


def test_tensordict_context_and_roundtrip():
    td = TensorDict({"a": torch.zeros(4, 2), "b": {"c": torch.ones(4)}, "note": "hi"}, batch_size=[4], names=["t"])
    (protocol, root), back = roundtrip(td)
    assert protocol == 1 and root["type"] == tensordict_cpp.SERIALIZED_TENSORDICT
    c = context(root)
    assert c["format"] == "tensordict-cpp/1" and c["keys"] == ["a", "b", "note"]
    assert c["batch_size"] == [4] and c["batch_dims"] == 1 and c["names"] == ["t"] and c["device"] is None
    assert isinstance(back, TensorDict) and back.batch_size == torch.Size([4]) and back.names == ["t"]
    assert (back["b", "c"] == 1).all() and back["note"] == "hi"


def test_device_and_empty():
    td = TensorDict({}, batch_size=[2, 3], device="cpu")
    (_, root), back = roundtrip(td)
    c = context(root)
    assert c["device"] == "cpu" and c["keys"] == [] and c["batch_size"] == [2, 3]
    assert back.device == torch.device("cpu") and back.batch_size == torch.Size([2, 3])


def test_tensorclass_keeps_its_class_and_fields():
    s = Sample(obs=torch.zeros(3, 2), reward=torch.ones(3), tag="eval", batch_size=[3])
    (_, root), back = roundtrip(s)
    c = context(root)
    assert root["type"] == f"{Sample.__module__}.{Sample.__qualname__}" and c["tensorclass"] is True
    assert isinstance(back, Sample) and back.tag == "eval" and back.batch_size == torch.Size([3])


def test_nested_in_containers():
    tree = ({"x": TensorDict({"a": torch.zeros(2)}, batch_size=[2])}, [torch.ones(1)])
    (_, root), back = roundtrip(tree)
    assert root["type"] == "builtins.tuple"
    assert isinstance(back[0]["x"], TensorDict) and back[1][0].item() == 1


def test_a_value_without_json_form_is_refused_with_its_key():
    td = TensorDict({"a": torch.zeros(1)}, batch_size=[1])
    td.set_non_tensor("bad", object())
    try:
        pytree.treespec_dumps(pytree.tree_structure(td))
    except TypeError as e:
        assert "'bad'" in str(e) and "no JSON form" in str(e)
    else:
        raise AssertionError("a value without JSON form was serialized")


def test_a_foreign_context_is_refused():
    node = pytree.SUPPORTED_SERIALIZED_TYPES[TensorDict]
    try:
        node.from_dumpable_context(json.dumps({"keys": []}))
    except ValueError as e:
        assert "tensordict-cpp/1" in str(e)
    else:
        raise AssertionError("a context of another format was read")


if __name__ == "__main__":
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_") and callable(f)]
    failed = 0
    for name, f in tests:
        try:
            f()
        except Exception as e:  # noqa: BLE001
            failed += 1
            print(f"FAILED {name}: {type(e).__name__}: {e}")
    print(f"{len(tests) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
