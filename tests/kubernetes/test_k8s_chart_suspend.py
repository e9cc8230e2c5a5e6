"""The chart's scheduler.suspend: off by default (the scheduler is told --no-suspend and keeps no
capability); on, the scheduler gets what the driver's checkpoint controller needs (CAP_SYS_PTRACE
over the pods' processes, the CUDA driver in its container) and --suspend-idle."""

from .test_k8s_helm import daemonset, render


def _scheduler(helm, *values):
    ds = daemonset(render(helm, *values), "scheduler")
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    return ds["spec"]["template"]["spec"], c


def test_suspend_is_off_by_default_with_no_capability(helm):
    spec, c = _scheduler(helm)
    assert "--no-suspend" in c["args"] and not any(a.startswith("--suspend-idle") for a in c["args"])
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {e["name"]: e.get("value") for e in c["env"]}["NVIDIA_DRIVER_CAPABILITIES"] == "utility"


def test_suspend_on_gives_the_scheduler_what_a_checkpoint_controller_needs(helm):
    spec, c = _scheduler(helm, "--set", "scheduler.suspend.enabled=true", "--set", "scheduler.suspend.idleSeconds=30")
    assert "--suspend-idle=30" in c["args"] and "--no-suspend" not in c["args"]
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_PTRACE"]}
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert spec["hostPID"] is True, "the checkpoint API takes the pods' pids as the host sees them"
    assert {e["name"]: e.get("value") for e in c["env"]}["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    from xpushare.scheduler.__main__ import build_parser
    args = build_parser().parse_args(c["args"])
    assert args.suspend_idle == 30 and not args.no_suspend


def test_move_suspended_is_a_value_of_suspend_and_needs_it_on(helm):
    _, off = _scheduler(helm, "--set", "scheduler.suspend.moveSuspended=true")
    assert "--move-suspended" not in off["args"], "no suspension, nothing to move"
    _, on = _scheduler(helm, "--set", "scheduler.suspend.enabled=true", "--set",
                       "scheduler.suspend.moveSuspended=true")
    from xpushare.scheduler.__main__ import build_parser
    assert build_parser().parse_args(on["args"]).move_suspended
