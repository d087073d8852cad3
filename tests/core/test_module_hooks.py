"""ModuleHooks: every module call of the model seen once, in order, by path; the model's own
hooks kept and run before the callbacks; one dispatcher of `nn.Module.__call__` for the passes
and the watchers, given back however they end."""

from pathlib import Path

import pytest
import torch

from fp16studio.core.run.module_hooks import ModuleHooks, add_watcher, module_names, remove_watcher

ORIGINAL_CALL = torch.nn.Module._wrapped_call_impl


class Recorded:
    def __init__(self):
        self.events = []

    def pre(self, name, module, args, kwargs):
        self.events.append(("pre", name, args[0].dtype if args else None))

    def post(self, module, args, kwargs, output):
        self.events.append(("post", type(module).__name__))


def model():
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Sequential(torch.nn.ReLU()))


def test_every_module_call_is_seen_in_order_with_its_path():
    net, seen = model(), Recorded()
    with torch.no_grad(), ModuleHooks(net, seen.pre, seen.post):
        net(torch.ones(1, 4))
    assert seen.events == [("pre", "", torch.float32), ("pre", "0", torch.float32),
                           ("post", "Linear"), ("pre", "1", torch.float32),
                           ("pre", "1.0", torch.float32), ("post", "ReLU"),
                           ("post", "Sequential"), ("post", "Sequential")]
    assert torch.nn.Module.__call__ is ORIGINAL_CALL
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in net.modules())


def test_the_models_own_hooks_run_first_even_when_added_during_the_pass():
    net, seen, ran = model(), Recorded(), []
    net[0].register_forward_pre_hook(lambda m, args: (args[0].double(),))
    net[0].double()

    def late(module, args, output):  # a hook a forward adds mid-pass, as some libraries do
        ran.append("late")

    def add_late(module, args):
        net[1][0].register_forward_hook(late)

    net[1].register_forward_pre_hook(add_late)
    with torch.no_grad(), ModuleHooks(net, seen.pre, seen.post):
        net(torch.ones(1, 4))
    assert ("pre", "0", torch.float64) in seen.events  # after the island-style cast
    assert ran == ["late"] and ("pre", "1.0", torch.float64) in seen.events
    assert [e for e in seen.events if e[0] == "post"] == [
        ("post", "Linear"), ("post", "ReLU"), ("post", "Sequential"), ("post", "Sequential")]
    assert [len(m._forward_hooks) for m in net.modules()] == [0, 0, 0, 1]  # ours gone, theirs kept


def test_global_hooks_and_an_overridden_call_are_honoured():
    class OwnCall(torch.nn.Linear):
        def __call__(self, *args, **kwargs):
            return super().__call__(*args, **kwargs) * 2

    net, seen, ran = torch.nn.Sequential(OwnCall(4, 4)), Recorded(), []
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda m, args, out: ran.append(type(m).__name__))
    try:
        with torch.no_grad(), ModuleHooks(net, seen.pre, seen.post):
            out = net(torch.ones(1, 4))
    finally:
        handle.remove()
    assert ran == ["OwnCall", "Sequential"]
    assert [e[1] for e in seen.events] == ["", "0", "OwnCall", "Sequential"]
    assert torch.equal(out, net(torch.ones(1, 4)))


def test_call_is_given_back_after_an_error_and_passes_that_end_out_of_order():
    net, seen = model(), Recorded()
    with pytest.raises(RuntimeError), ModuleHooks(net, seen.pre, seen.post):
        net(torch.ones(1, 3))  # shapes do not match
    assert torch.nn.Module.__call__ is ORIGINAL_CALL
    assert seen.events[-1] == ("pre", "0", torch.float32)  # the module where it failed

    first, second = Recorded(), Recorded()
    outer = ModuleHooks(net, first.pre, first.post).__enter__()
    inner = ModuleHooks(net[1], second.pre, second.post).__enter__()
    outer.__exit__()  # another thread's pass ending first
    net(torch.ones(1, 4))
    assert first.events == [] and [e[1] for e in second.events if e[0] == "pre"] == ["", "0"]
    inner.__exit__()
    assert torch.nn.Module.__call__ is ORIGINAL_CALL
    net(torch.ones(1, 4))
    assert len(second.events) == 4


def test_passes_over_the_same_modules_both_see_every_call():
    net, outer, inner = model(), Recorded(), Recorded()
    with ModuleHooks(net, outer.pre, outer.post), ModuleHooks(net[1], inner.pre, inner.post):
        net(torch.ones(1, 4))
    assert [e[1] for e in outer.events if e[0] == "pre"] == ["", "0", "1", "1.0"]
    assert [e[1] for e in inner.events if e[0] == "pre"] == ["", "0"]
    assert len(outer.events) == 8 and len(inner.events) == 4
    assert torch.nn.Module.__call__ is ORIGINAL_CALL


def test_passes_entered_at_once_from_two_threads_are_both_kept(monkeypatch):
    import threading

    from fp16studio.core.run import module_hooks

    walk, barrier = module_hooks.module_names, threading.Barrier(2)

    def slow_walk(net):  # both threads walk their models before either joins the dispatcher
        names = walk(net)
        barrier.wait(timeout=10)
        return names

    monkeypatch.setattr(module_hooks, "module_names", slow_walk)
    nets, seen, passes = [model(), model()], [Recorded(), Recorded()], [None, None]

    def enter(i):
        passes[i] = ModuleHooks(nets[i], seen[i].pre, seen[i].post).__enter__()

    threads = [threading.Thread(target=enter, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for net in nets:
        net(torch.ones(1, 4))
    for p in passes:
        p.__exit__()
    assert [len(s.events) for s in seen] == [8, 8]
    assert torch.nn.Module.__call__ is ORIGINAL_CALL


def test_a_script_trace_and_a_pass_share_one_dispatcher_and_both_see_every_call():
    from fp16studio.core.script.tracer import ScriptTracer, UserCode

    script = ScriptTracer(UserCode(Path(__file__)))
    net, seen = model(), Recorded()
    script.install()
    try:
        dispatcher = torch.nn.Module.__call__
        assert dispatcher is not ORIGINAL_CALL
        with torch.no_grad(), ModuleHooks(net, seen.pre, seen.post):
            assert torch.nn.Module.__call__ is dispatcher  # not wrapped a second time
            net(torch.ones(1, 4))  # the script's first call of net: traced too
            net(torch.ones(1, 4))
        assert torch.nn.Module.__call__ is dispatcher
    finally:
        script.uninstall()
    assert torch.nn.Module.__call__ is ORIGINAL_CALL
    (trace,) = script.traces
    assert [c.name for c in trace.calls] == ["", "0", "1", "1.0"] and trace.count == 2
    assert [e[1] for e in seen.events if e[0] == "pre"] == ["", "0", "1", "1.0"] * 2
    assert len(seen.events) == 16
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in net.modules())


def test_the_dispatcher_stays_until_its_last_listener_leaves_in_any_order():
    net, seen, watched = model(), Recorded(), []

    def watch(module, args, kwargs):
        watched.append(type(module).__name__)

    add_watcher(watch)
    net(torch.ones(1, 4))
    assert watched == ["Sequential", "Linear", "Sequential", "ReLU"]
    hooks = ModuleHooks(net, seen.pre, seen.post).__enter__()
    remove_watcher(watch)  # the first listener leaves first
    net(torch.ones(1, 4))
    assert len(watched) == 4 and len(seen.events) == 8
    hooks.__exit__()
    assert torch.nn.Module.__call__ is ORIGINAL_CALL


def test_module_names_match_named_modules_with_shared_modules():
    shared = torch.nn.Linear(2, 2)
    net = torch.nn.ModuleDict({"a": torch.nn.Sequential(shared, torch.nn.ReLU()), "b": shared,
                               "c": torch.nn.ModuleList([torch.nn.Identity(), shared])})
    assert list(module_names(net).items()) == [(m, n) for n, m in net.named_modules()]
