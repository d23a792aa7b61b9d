"""CPU checks of what makes SGLang's own code run on the GPU machine (benchmarks/sglang_gpu/).

Real: SGLang's ``HiCacheController``, ``DeepSeekV4TokenToKVPool`` and ``DeepSeekV4PagedHostPool`` on CPU,
loading through SGLang's ``L2TransferEngine`` into the pool with the plain-torch stand-in of
``sgl_kernel.kvcacheio.transfer_kv_direct`` (on CPU SGLang does not even define the name: its import
is CUDA-guarded). Not here: streams, events and stale reads, which need a GPU
(tests/gpu/test_sglang_race_gpu.py).
"""

import sys
import zipfile

import pytest
import torch

from benchmarks.sglang_gpu import bundle, race, standins, stubs

ROOT = "not_installed_native_pkg_for_tests"


@pytest.fixture
def stub_finder(monkeypatch):
    finder = stubs.StubFinder(roots={ROOT})
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, finder])
    yield finder
    for name in [n for n in sys.modules if n.split(".")[0] == ROOT]:
        del sys.modules[name]


def test_a_stubbed_op_names_itself_when_called(stub_finder):
    import importlib

    ops = importlib.import_module(f"{ROOT}.kvcacheio")
    with pytest.raises(stubs.NativeOpUnavailable, match=rf"{ROOT}\.kvcacheio\.transfer_kv_direct was called"):
        ops.transfer_kv_direct([], [], torch.zeros(1), torch.zeros(1), 1)


def test_a_stub_works_as_decorator_base_class_and_type(stub_finder):
    import importlib

    mod = importlib.import_module(ROOT)

    @mod.register
    def kept():
        return 7

    class Sub(mod.Base):
        pass

    assert kept() == 7  # the decorated function itself
    assert issubclass(Sub, stubs._StubBase) and isinstance(Sub(), Sub)
    assert not isinstance(3, mod.SomeType)  # nothing is an instance of a stubbed type
    assert isinstance(mod.SomeType | None, stubs.StubObject)  # annotations like `T | None` evaluate


def test_real_packages_are_not_stubbed_unless_forced():
    finder = stubs.StubFinder(roots={"json"})
    assert finder.find_spec("json", None) is None
    assert stubs.StubFinder(roots={"json"}, force=True).find_spec("json", None) is not None


def test_contiguous_runs_merge_only_where_both_sides_continue():
    src = torch.tensor([4, 5, 6, 9, 10, 2])
    dst = torch.tensor([0, 1, 3, 4, 5, 6])
    assert standins.contiguous_runs(src, dst) == [(4, 0, 2), (6, 3, 1), (9, 4, 2), (2, 6, 1)]


def test_transfer_kv_direct_standin_copies_rows_like_a_gather():
    g = torch.Generator().manual_seed(0)
    src = [torch.randint(0, 255, (12, 16), generator=g, dtype=torch.uint8) for _ in range(2)]
    dst = [torch.zeros(10, 16, dtype=torch.uint8) for _ in range(2)]
    src_idx, dst_idx = torch.tensor([3, 4, 5, 11, 0]), torch.tensor([1, 2, 3, 7, 9])
    standins.transfer_kv_direct(src, dst, src_idx, dst_idx, page_size=1)
    for s, d in zip(src, dst):
        want = torch.zeros_like(d)
        want[dst_idx] = s[src_idx]
        assert torch.equal(d, want)
    with pytest.raises(ValueError, match="source layers"):
        standins.transfer_kv_direct(src, dst[:1], src_idx, dst_idx, page_size=1)


@pytest.fixture
def cpu_transfer(ext_active, monkeypatch):
    import sglang.srt.mem_cache.memory_pool_host as mph

    monkeypatch.setattr(mph, "transfer_kv_direct", standins.transfer_kv_direct, raising=False)


def test_hicache_controller_loads_layer_by_layer_through_the_standin(cpu_transfer):
    stack = race.Stack(race.RaceConfig(layers=3, pages=2), "auto", device="cpu")
    assert stack.pool.layer_transfer_counter is stack.controller.layer_done_counter
    stack.controller.load(stack.host_slots[4])
    producer = stack.controller.start_loading()  # SGLang: producer slot, start event, L2 submission
    stack.counter.set_consumer(producer)
    try:
        for layer in range(3):
            stack.read_toplevel(layer)
    finally:
        stack.counter.set_consumer(-1)
    assert torch.equal(stack.res[1], stack.expected[4])  # every layer's pages landed with set 4's bytes
    assert stack.res[1].unique().numel() == 3  # and the layers differ: no layer was loaded into another


@pytest.mark.parametrize("gate, refused", [("off", False), ("auto", False), ("strict", True)])
def test_race_subpool_reader_per_gate_mode(cpu_transfer, gate, refused):
    """The GPU race's R1 reader on CPU: strict refuses the unwaited sub-pool read, the others read."""
    stack = race.Stack(race.RaceConfig(layers=2, pages=1), gate, device="cpu")
    stack.controller.load(stack.host_slots[2])
    stack.counter.set_consumer(stack.controller.start_loading())
    try:
        stack.res.fill_(-1)
        stack.read_subpool(1)
    finally:
        stack.counter.set_consumer(-1)
    assert stack.refused[1] is refused
    assert int(stack.res[0, 1]) == (-1 if refused else int(stack.expected[2][1]))


def test_bundle_prunes_native_modules_and_unused_trees(tmp_path):
    wheel = tmp_path / "sglang-0.5.23-cp311-cp311-linux_x86_64.whl"
    names = [
        "sglang/__init__.py",
        "sglang/srt/x.py",
        "sglang/srt/rust_extensions/_server.cpython-311-x86_64.so",
        "sglang/multimodal_gen/y.py",
        "sglang/test/z.py",
        "sglang-0.5.23.dist-info/METADATA",
    ]
    with zipfile.ZipFile(wheel, "w") as zf:
        for name in names:
            zf.writestr(name, "x")
    stats = bundle.prune_wheel(wheel, tmp_path / "out.zip")
    kept = zipfile.ZipFile(tmp_path / "out.zip").namelist()
    assert kept == ["sglang/__init__.py", "sglang/srt/x.py", "sglang-0.5.23.dist-info/METADATA"]
    assert stats["files_dropped"] == 3
