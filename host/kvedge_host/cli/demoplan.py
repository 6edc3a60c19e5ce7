"""kvedge demo's plan and the runner call that runs it, three ways: from the profile's measured footprint
(plan_measured: the emulated board), from a given document (plan_given: --plan) and from the runner's code
measured on the unix port or a board at --port (plan_host: the planning loop, kvedge_host.plan.demoloop). Each
returns (plan document, the code the board runs); `a` is the demo's arguments, `say` prints a line."""
import os

from ..boards import board_scripts
from ..errors import UserError


def plan_measured(a, prof, model, w, tok, heap, prompt, work, say, ctrl_c=True):
    """kvedge plan from the profile's measured footprint (kvedge_host.boards.planrun.plan_for), and the runner call
    that runs it: the budget the board checks is the plan's, so what runs is what was planned."""
    from ..boards import planrun
    plan_path = os.path.join(work, "plan.json")
    other = heap if heap != prof["heap_bytes"] else None
    if other:
        from ..boards.m3board import layout_for, m3_heap
        full = m3_heap(prof, a.board)
        if w["rom"] and heap != full:
            say("the ROMFS slot of the emulated board's %s-byte image (%s bytes) cannot hold the weights: it runs "
                "the %s-byte image (slot %s bytes), and the plan is made for that heap (kvedge plan --heap %d)" % (
                    format(full, ","), format(layout_for(a.board, full).romfs_max, ","), format(heap, ","),
                    format(layout_for(a.board, heap).romfs_max, ","), heap))
        else:
            say("the emulated board has no %s-byte image: it runs the %s-byte one, and the plan is made for that "
                "heap (kvedge plan --heap %d)" % (format(prof["heap_bytes"], ","), format(heap, ","), heap))
    plan = planrun.plan_for(a.board, model, tok, plan_path, heap=other, prompt=prompt, stats=a.stats_ms > 0,
                            log=say, weights_dtype=w["dtype"])
    from kvedge.model.plandoc import streams_stats
    rt = plan["runtime"]
    stats_ms = a.stats_ms if streams_stats(plan) else 0
    say("plan (%s): "
        "%s, %s kernels, weights %s; %s bytes of the %s usable (runtime %s measured on the emulated board, %s; "
        "margin %s kept free)" % (
            planrun.plan_command(model, a.board, plan, other, prompt, w["dtype"]), plan["strategy"], rt["kernels"],
            "in RAM" if plan["weights"]["place"] == "heap" else "read from flash", format(plan["total_bytes"], ","),
            format(rt["usable_heap"], ","), rt.get("command"), rt.get("date"), format(rt["margin_bytes"], ",")))
    say_without(plan, say)
    kw = planrun.runner_args(plan, a.steps, stats_ms, prompt, a.temperature, a.seed, model, tok)
    kw["ctrl_c"] = ctrl_c  # mpremote's Ctrl-C reaches a board that reads its UART only when asked
    if w["rom"] and kw["stream"]:
        kw["stream"] = "rom"  # the plan's weights on flash: read in place from the ROMFS image
    return plan, planrun.runner_code(w["board"], "tok.bin", kw)


def say_without(plan, say):
    """A plan that leaves board-side parts out (kvedge.model.plandoc's "without") says so, and what follows."""
    from kvedge.model.plandoc import ENCODER, STATS, without
    w = without(plan)
    if ENCODER in w:
        say("the plan leaves the board's prompt encoder out: the prompt is encoded here and sent as token ids")
    if STATS in w:
        say("the plan leaves the stats stream out: no stats lines from the board")


def plan_given(a, w, tok, heap, prompt, say, ctrl_c=True):
    """--plan: the given document, checked at the board's heap and against the model files by the device's own
    reader (kvedge.model.runplan.plan_args), and the runner call that runs it: a plan with the runtime's measured
    footprint as kvedge_host.boards.planrun runs one, any other with the budget and workspace the board reads from it."""
    from kvedge.errors import PlanError
    from kvedge.model.runplan import plan_args, run_args
    from ..boards import planrun
    from .. import validate
    plan = validate.plan_file(a.plan, heap)
    try:
        pa = plan_args(plan, w["path"], tok, heap)
    except PlanError as e:
        raise UserError("%s: %s (model %s)" % (a.plan, e, w["path"]))
    if pa["workspace"] < 0:
        raise UserError("%s: the runner's own account of this plan is %d bytes over its total: plan again with "
                        "--workspace %d" % (a.plan, -pa["workspace"], plan["workspace_bytes"] - pa["workspace"]))
    from kvedge.model.plandoc import streams_stats
    from kvedge.model.runplan import prompt_args
    from kvedge.model.header import read_config
    stats_ms = a.stats_ms if streams_stats(plan) else 0
    say_without(plan, say)
    if (plan.get("runtime") or {}).get("source") == "measured":
        kw = planrun.runner_args(plan, a.steps, stats_ms, prompt, a.temperature, a.seed, w["path"], tok)
        kw.update({k: v for k, v in run_args(pa).items() if k in ("tier", "forward", "prefill")})
    else:
        kw = dict(run_args(pa), steps=a.steps, temperature=a.temperature, seed=a.seed, stats_ms=stats_ms, peak=True)
        kw.update(prompt_args(plan, prompt, tok, read_config(w["path"])[0].vocab_size))
    kw["ctrl_c"] = ctrl_c
    if w["rom"] and kw.get("stream"):
        kw["stream"] = "rom"
    say("plan: %s (--plan %s), weights %s; %s bytes of a %s-byte heap" % (
        plan["strategy"], a.plan, "in RAM" if plan["weights"]["place"] == "heap" else "read from flash",
        format(plan["total_bytes"], ","), format(plan["heap_bytes"], ",")))
    return plan, planrun.runner_code(w["board"], "tok.bin", kw)


def plan_host(a, prof, vb, model, w, tok, cfg, prompt, work, say):
    """On the unix port (or a board at --port): the runner's code measured there, then the planning loop with it
    as workspace."""
    from kvedge.model.run import RUN_OVERHEAD
    from kvedge.model.tokenizer import Tokenizer
    from ..boards.deploy import DeployError, mpremote
    try:
        out = mpremote(vb.port, ["exec", board_scripts.source("demo_footprint")], resume=False)
    except DeployError as e:
        if "MemoryError" not in str(e):
            raise
        # a small profile's heap on the unix port, whose 64-bit objects take about twice a board's: the runner's
        # modules alone do not load (esp32's 102,400 bytes), refused before anything is planned or run
        raise UserError("the %s profile's %s-byte heap cannot load the runner's code on the MicroPython unix port "
                        "(64-bit objects, about twice a board's; MemoryError importing it): run it on the emulated "
                        "board (../shared/runtimes, KVEDGE_M3_FIRMWARE) or on the board itself (--port)"
                        % (a.board, format(vb.heap, ",")))
    line = [ln for ln in out.splitlines() if ln.startswith("KVFOOTPRINT ")]
    if not line:
        raise UserError("the board did not report its footprint:\n" + out[-1500:])
    code, free, kind = line[0].split()[1:4]
    code = int(code)
    tok_bytes = Tokenizer.nbytes(tok, cfg.vocab_size)
    workspace = prof.get("workspace_bytes", 0) + code + tok_bytes + RUN_OVERHEAD
    say("measured on the board: the runner's code takes %s bytes of heap (%s kernels); workspace for "
        "the plan = board %s + code %s + tokenizer %s + loop %s = %s bytes" % (
            format(code, ","), kind, format(prof.get("workspace_bytes", 0), ","), format(code, ","),
            format(tok_bytes, ","), format(RUN_OVERHEAD, ","), format(workspace, ",")))
    from ..plan.demoloop import plan_loop
    from .cmd_plan import print_plan
    plan, kv, stream, h2o = plan_loop(model, w["path"], a.board, vb.heap, workspace,
                                      prof.get("workspace_bytes", 0) + code + tok_bytes + RUN_OVERHEAD,
                                      os.path.join(work, "plan.json"), say,
                                      lambda spec, tgt, result, chosen: print_plan(spec, tgt, result, chosen, 6))
    code_run = ("from kvedge.model import run\n"
                "run.main(%r, 'tok.bin', prompt=%r, steps=%d, temperature=%r, seed=%d, kv=%r, "
                "budget=%d, workspace=%d, stream=%r, h2o=%d, stats_ms=%d, ctrl_c=True, peak=True)\n" % (
                    w["board"], prompt, a.steps, a.temperature, a.seed, kv, vb.heap,
                    prof.get("workspace_bytes", 0) + code, stream, h2o, a.stats_ms))
    return plan, code_run
