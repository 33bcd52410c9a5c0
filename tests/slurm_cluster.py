"""A one-node SLURM cluster on localhost for the tests: Debian's slurm-wlm (slurmctld, slurmd; 22.05 on Debian
12) and munge, with every file (configuration, munge key and socket, state, spool, logs) under one folder.

The daemons read that folder's slurm.conf (SLURM_CONF) and reach munge through the socket it names (AuthInfo),
so no system munge is needed. Clients find it where a real site keeps it: /etc/slurm/slurm.conf, a link made
for the life of the cluster (only where that path is free) and removed at the end. The link is needed because
the srun that snakemake-executor-plugin-slurm-jobstep 0.6.1 starts inside each job runs with every SLURM_*
variable removed, SLURM_CONF included, and then finds no configuration ("Could not establish a configuration
source"); jobstep 0.6.0 keeps SLURM_CONF. Each daemon runs in the foreground as a child of the test, in its
own session, and is ended by its pid (and that session's process group); it also gets SIGTERM if the test
process dies without ending it.

The node has the machine's CPUs and memory (as `slurmd -C` reports them) and one `gpu` GRES, so that jobs
that ask for `--gpus=1` or `--gres=gpu:1` are scheduled. SLURM 22.05 drops a GPU without a device file from
the node's GRES ("Removing file-less GPU gpu:(null) from final GRES list" in slurmd's log, then the node is
drained with "gres/gpu count reported lower than configured"), so the GRES names /dev/null as its file:
nothing opens it (task/none, no cgroups, so no device constraint either), and SLURM sets
CUDA_VISIBLE_DEVICES=0 in the job, which the CPU stack ignores. No cgroups (proctrack/linuxproc, task/none),
no accounting (accounting_storage/none: `sacct` answers "Slurm accounting storage is disabled"), so job states
are read with `squeue --states=all` and `scontrol show job`, which keep finished jobs for MinJobAge (1 h).
"""

from __future__ import annotations

import ctypes
import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

#: The programs the cluster needs: daemons (in /usr/sbin on Debian) and the clients the executor plugin calls.
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "squeue", "scontrol", "sinfo", "scancel")
PARTITION = "gpu"  # the name profiles/slurm asks for, so the test needs no partition override
#: Where SLURM's clients look for their configuration when SLURM_CONF is not set (Debian's build).
DEFAULT_CONF = Path("/etc/slurm/slurm.conf")
#: The first line of the test cluster's slurm.conf: a link at DEFAULT_CONF to such a file is the test's own.
MARKER = "# specsweep test cluster (tests/slurm_cluster.py)"


class Unavailable(Exception):
    """The machine cannot host the test cluster (the reason is the message)."""


_SEARCH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def which(name: str) -> str | None:
    return shutil.which(name, path=_SEARCH)


def missing() -> list[str]:
    return [name for name in DAEMONS + CLIENTS if which(name) is None]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _node_hardware() -> dict[str, str]:
    """`slurmd -C`'s first line as key=value pairs (NodeName, CPUs, Boards, SocketsPerBoard, CoresPerSocket,
    ThreadsPerCore, RealMemory): configuring the node exactly as slurmd will report it keeps it from being
    drained for a mismatch."""
    out = subprocess.run([which("slurmd") or "slurmd", "-C"], capture_output=True, text=True, check=True).stdout
    return dict(item.split("=", 1) for item in out.splitlines()[0].split())


def _die_with_parent() -> None:
    """In the daemon before exec: SIGTERM when the test process dies, even by kill -9 (PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def _tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return f"({path} not written)"


@dataclass
class Cluster:
    root: Path
    node: str = ""
    cpus: int = 0
    mem_mb: int = 0
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *cmd: str, check: bool = True) -> str:
        """A SLURM client command against this cluster; its stdout."""
        proc = subprocess.run(
            [which(cmd[0]) or cmd[0], *cmd[1:]], capture_output=True, text=True, env=self.env, timeout=60
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc.stdout

    def jobs(self) -> dict[str, dict[str, str]]:
        """Every job slurmctld still knows (finished ones for MinJobAge), by job id: `scontrol show job -o`'s
        fields (JobState, Partition, Comment, TresPerJob, NodeList, ...)."""
        out = {}
        for line in self.run("scontrol", "show", "job", "-o").splitlines():
            fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
            if "JobId" in fields:
                out[fields["JobId"]] = fields
        return out

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{_tail(p)}" for p in sorted((self.root / "log").glob("*")))

    def _write_config(self) -> None:
        hw = _node_hardware()
        self.node = socket.gethostname().split(".")[0]
        self.cpus = int(hw["CPUs"])
        self.mem_mb = int(hw["RealMemory"])
        node_hw = " ".join(f"{k}={v}" for k, v in hw.items() if k not in ("NodeName", "UpTime"))
        user = getpass.getuser()
        r = self.root
        for sub in ("state", "spool", "log", "munge-key", "munge"):
            (r / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(r / "munge", 0o755)  # the socket's folder: every client needs to reach it
        key = r / "munge-key" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        self.conf.write_text(
            f"""\
{MARKER}
ClusterName=specsweep-test
SlurmctldHost={self.node}(127.0.0.1)
SlurmUser={user}
SlurmdUser={user}
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={r}/munge/munge.socket
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
MinJobAge=3600
ReturnToService=2
MpiDefault=none
NodeName={self.node} NodeAddr=127.0.0.1 {node_hw} Gres=gpu:1 State=UNKNOWN
PartitionName={PARTITION} Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
"""
        )
        (r / "gres.conf").write_text(f"AutoDetect=off\nNodeName={self.node} Name=gpu Count=1 File=/dev/null\n")

    def _spawn(self, name: str, *args: str) -> None:
        with open(self.root / "log" / f"{name}.out", "ab") as log:
            self.procs[name] = subprocess.Popen(
                [which(name) or name, *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    def _wait(self, what: str, ready, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode} before {what}:\n{self.logs()}")
            if ready():
                return
            time.sleep(0.5)
        raise RuntimeError(f"the SLURM test cluster: no {what} after {timeout:g} s:\n{self.logs()}")

    def _node_state(self) -> str:
        proc = subprocess.run(
            [which("sinfo") or "sinfo", "-h", "-N", "-n", self.node, "-o", "%T"],
            capture_output=True,
            text=True,
            env=self.env,
        )
        return proc.stdout.strip() if proc.returncode == 0 else ""

    def _link_default_conf(self) -> None:
        """/etc/slurm/slurm.conf -> this cluster's slurm.conf. A link left by a test cluster that is gone (its
        folder removed, or its slurmctld no longer running) is replaced; any other file there is refused."""
        link = DEFAULT_CONF
        if link.is_symlink() or link.exists():
            ours = link.is_symlink() and (not link.exists() or link.read_text().startswith(MARKER))
            if not ours:
                raise Unavailable(f"this machine has its own SLURM configuration at {link}; the test cluster leaves it")
            pid_file = link.resolve().parent / "slurmctld.pid"
            try:
                other = int(pid_file.read_text().strip())
                os.kill(other, 0)
                raise Unavailable(f"another test cluster is running ({link} -> {os.readlink(link)})")
            except (OSError, ValueError):
                link.unlink()  # a test cluster that is gone left it
        try:
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(self.conf)
        except OSError as exc:
            raise Unavailable(f"cannot link {link} to the test cluster's configuration: {exc}") from exc

    def _unlink_default_conf(self) -> None:
        if DEFAULT_CONF.is_symlink() and os.readlink(DEFAULT_CONF) == str(self.conf):
            DEFAULT_CONF.unlink()

    def start(self) -> Cluster:
        self._write_config()
        self._link_default_conf()
        r = self.root
        self._spawn(
            "munged",
            "--foreground",
            "--force",
            f"--socket={r}/munge/munge.socket",
            f"--key-file={r}/munge-key/munge.key",
            f"--log-file={r}/log/munged.log",
            f"--pid-file={r}/munge-key/munged.pid",
            f"--seed-file={r}/munge-key/munged.seed",
        )
        self._wait("munge socket", lambda: (r / "munge" / "munge.socket").exists())
        self._spawn("slurmctld", "-D", "-i")
        self._wait("slurmctld answering", lambda: self._node_state() != "")
        self._spawn("slurmd", "-D", "-N", self.node)
        self._wait(f"node {self.node} idle", lambda: self._node_state() == "idle")
        return self

    def stop(self) -> None:
        """Cancel what is still queued or running, then end the daemons (slurmd, slurmctld, munged), each by
        its pid and its own process group; SIGKILL after 15 s."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            ids = self.run("squeue", "-h", "-t", "PENDING,RUNNING,COMPLETING", "-o", "%i", check=False).split()
            if ids:
                self.run("scancel", *ids, check=False)
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and self.run("squeue", "-h", "-o", "%i", check=False).strip():
                    time.sleep(0.5)
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.get(name)
            if proc is None:
                continue
            for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
                if proc.poll() is not None:
                    break
                try:
                    os.killpg(proc.pid, sig)  # its session: slurmctld's slurmscriptd too
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=wait)
                except subprocess.TimeoutExpired:
                    pass
            # children that outlived their daemon in its process group (slurmscriptd)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._unlink_default_conf()

    def alive(self) -> list[str]:
        return [name for name, proc in self.procs.items() if proc.poll() is None]
