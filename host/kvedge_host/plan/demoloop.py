"""kvedge demo's planning loop on a runtime measured by its own code (the unix port, a board at a port): plan,
recompute the need with the runner's own account, plan again with the difference reserved. `show` prints each
round's plan (the CLI's table), `say` a line."""
import json
import os

from ..errors import UserError


def plan_loop(model, weights, board, heap, workspace, run_workspace, plan_path, say, show):
    """The source document's loop: plan (kvedge plan), recompute the need with the runner's own account
    (kvedge.model.llama.plan: Python objects, scratch, streaming buffers, policy arrays on top of the budget
    formulas), and when it is over the heap plan again with that difference reserved; at most four rounds."""
    from kvedge.model.header import read_config, weights_place
    from kvedge.model import llama
    from kvedge.model.runplan import doc_args
    from . import planner
    cfg, wdtype = read_config(weights)
    extra = 0
    for round_ in range(4):
        say("planning round %d (kvedge plan --model %s --board %s --weights-dtype %s --kv-dtype i8 --align 0 "
            "--no-tiered --workspace %d):" % (round_ + 1, os.path.basename(model), board, wdtype, workspace + extra))
        spec, context, tgt = planner.inputs(model, board=board, workspace=workspace + extra, weights_dtype=wdtype)
        try:
            # no tiered cache: the runner call below (and the runner's account) build the plan's cache in RAM
            p = planner.plan(spec, context, tgt, kv_dtype="i8", weights_dtype=wdtype, align=0, tiered=False,
                             workspace=workspace + extra, model=model)
        except planner.NothingFits:
            p = None
        if p is None or p.document is None:
            raise UserError("no cache configuration fits %s with this model" % board)
        show(spec, tgt, p.result, p.chosen)
        plan = p.document
        with open(plan_path, "w") as f:
            json.dump(plan, f, indent=2)
            f.write("\n")
        # the runner's arguments as the board reads the plan (kvedge.model.runplan.doc_args); weights_place:
        # "rom" is streamed here when the file is not mapped, as on the board
        args = doc_args(plan)
        kv, h2o = args["kv"], args["h2o"]
        stream = weights_place(weights, args["stream"])
        ccfg = llama.cache_config(cfg, kv)
        need = llama.plan(cfg, wdtype, ccfg, stream, 32, run_workspace + ((8 * ccfg.slots + 256) if h2o else 0))
        say("the runner's account of \"%s\": weights %s + kv %s + activations %s + workspace %s = %s bytes "
            "for a %s-byte heap" % (plan["strategy"], format(need["weights"], ","), format(need["kv"], ","),
                                    format(need["activations"], ","), format(need["workspace"], ","),
                                    format(need["total"], ","), format(heap, ",")))
        if need["total"] <= heap:
            return plan, kv, stream, h2o
        extra += need["total"] - plan["total_bytes"]
        say("over by %s bytes: planning again with that reserved" % format(need["total"] - heap, ","))
    raise UserError("the plan and the runner's account did not converge in four rounds")
