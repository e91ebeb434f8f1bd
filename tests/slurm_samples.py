"""SLURM replies captured on the test cluster (tests/slurm/cluster.sh, SLURM 22.05), as text."""

#: scontrol show job -o of a held job asking for what the plugin asks for.
SHOW_JOB = (
    "JobId=1 JobName=shardwise_x UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=0 "
    "Nice=0 Account=shardwise QOS=normal JobState=PENDING Reason=JobHeldUser "
    "Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 "
    "RunTime=00:00:00 TimeLimit=04:00:00 TimeMin=N/A SubmitTime=2026-12-01T05:54:58 "
    "EligibleTime=Unknown AccrueTime=Unknown StartTime=Unknown EndTime=Unknown Deadline=N/A "
    "SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-12-01T05:54:58 Scheduler=Main "
    "Partition=ice-gpu,coe-gpu AllocNode:Sid=localhost:5325 ReqNodeList=(null) "
    "ExcNodeList=gpu-bad01 NodeList= NumNodes=1 NumCPUs=2 NumTasks=1 CPUs/Task=2 "
    "ReqB:S:C:T=0:0:*:* TRES=cpu=2,mem=1000M,node=1,billing=2,gres/gpu=1 Socks/Node=* "
    "NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=2 MinMemoryNode=1000M MinTmpDiskNode=0 "
    "Features=fakegpu DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) "
    "Network=(null) Command=(null) WorkDir=/tmp Comment=rule_classify_classify  "
    "StdErr=/tmp/slurm-1.out StdIn=/dev/null StdOut=/tmp/slurm-1.out Power= "
    "TresPerJob=gres:gpu:1 "
)

#: sinfo -h -N -o '%N|%P|%a|%l|%G|%T|%f|%H|%E' with node vm drained.
SINFO_NODES = """\
gpu-bad01|ice-gpu*|up|infinite|(null)|down*|fakegpu|Unknown|none
gpu-bad01|coe-gpu|up|4:00:00|(null)|down*|fakegpu|Unknown|none
vm|ice-gpu*|up|infinite|gpu:2|drained|fakegpu|2026-12-01T05:49:51|fan broken
vm|coe-gpu|up|4:00:00|gpu:2|drained|fakegpu|2026-12-01T05:49:51|fan broken
"""

#: scontrol show reservation -o with a maintenance window.
RESERVATION = (
    "ReservationName=m2 StartTime=2026-12-01T06:24:59 EndTime=2026-12-01T08:24:59 "
    "Duration=02:00:00 Nodes=gpu-bad01,vm NodeCnt=2 CoreCnt=16 Features=(null) "
    "PartitionName=(null) Flags=MAINT,SPEC_NODES,ALL_NODES TRES=cpu=16 Users=root "
    "Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) "
    "Watts=n/a MaxStartDelay=(null)"
)

#: scontrol write batch_script of a group job the plugin submitted (--wrap: one line).
WRAP_SCRIPT = (
    "#!/bin/sh\n# This script was created by sbatch --wrap.\n\n"
    "/venv/bin/python -m snakemake --snakefile '/repo/Snakefile' --target-jobs "
    "'classify:shard=6' 'classify:shard=7' --allowed-rules classify --local-groupid "
    "'97f2ef8b' --cores 'all' --attempt 1 --wait-for-files '/work/.snakemake/tmp.2uk4qlxx' "
    "--force --target-files-omit-workdir-adjustment --max-inventory-time 0 --retries 0 "
    "--nocolor --no-hooks --nolock --ignore-incomplete --rerun-triggers input mtime "
    "--latency-wait 5 --scheduler 'greedy' --set-resource-scopes 'gpu=local' --configfiles "
    "/work/demo/config.yaml --set-threads base64//Y2xhc3NpZnk9MQ== --executor slurm-jobstep "
    "--jobs 1 --mode 'remote'\n"
)


def job(job_id: str, state: str = "PENDING", **over):
    """A `queries.Job` as squeue lists one of the plugin's jobs (fields overridable)."""
    from datetime import datetime

    from shardwise.slurm.queries import Job

    fields = {
        "id": job_id,
        "state": state,
        "name": "shardwise_u",
        "user": "me",
        "partition": "gpu",
        "time_limit_minutes": 60,
        "submit_time": datetime(2026, 12, 1, 6, 0),
        "start_time": None,
        "nodes": "",
        "tres_alloc": "",
        "tres_per_job": "gres:gpu:1",
        "tres_per_node": "",
        "qos": "normal",
        "account": "a",
        "workdir": "/work",
        "reason": "Priority",
        "comment": "rule_classify_classify",
    }
    fields.update(over)
    return Job(**fields)
