"""`precision-doctor snapshot`: this machine's facts (or an allocation's) as JSON for --facts."""

from __future__ import annotations

import argparse
import sys

from ..model.errors import InputError
from ..model.facts import MachineFacts
from ._common import EXIT_OK, write_output


def register(sub) -> None:
    snap = sub.add_parser(
        "snapshot",
        help="write this machine's facts (or a profile's) as JSON for --facts",
        description="Write the machine facts the checks read (GPUs, compute modes, GPU processes, "
        "busy ports, launch environment, accelerate config, installed versions) as "
        "JSON. Run it on the cluster node; check scripts anywhere with --facts.",
    )
    snap.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    snap.add_argument("--target", metavar="NAME[:COUNT]", help="a profile's facts, to adjust by hand")
    snap.add_argument("--launcher", metavar="CMD", help="the launch command whose port to test")
    snap.add_argument(
        "--all-nodes",
        action="store_true",
        help="inside a SLURM allocation: probe every node through srun and write one multi-node snapshot",
    )
    snap.add_argument(
        "--include-host",
        action="store_true",
        help="keep the host name, the user names and the network addresses (left out by default: a snapshot is "
        "meant to be committed or shared)",
    )
    snap.add_argument("--node-json", action="store_true", help=argparse.SUPPRESS)  # one node's line for --all-nodes


def write_snapshot(opts) -> int:
    import os

    from ..probes.collect import gather_machine, snapshot_json
    from ..probes.launch import no_launcher, parse_launcher
    from ..probes.stack import probe_stack

    if opts.all_nodes:
        from ..probes.collect import gather_allocation

        if opts.target:
            raise InputError(
                "snapshot: --all-nodes probes the allocation's nodes; --target writes a profile: pass one of them"
            )
        machine, stack = gather_allocation(os.environ, opts.launcher)
        machine = machine if opts.include_host else without_host_identity(machine)
        write_output(opts.output, snapshot_json(machine, stack) + "\n")
        print(f"wrote {opts.output or 'stdout'} ({machine.describe()})", file=sys.stderr)
        return EXIT_OK
    launch = parse_launcher(opts.launcher) if opts.launcher else no_launcher()
    machine, _ = gather_machine(opts.target, None, launch, os.environ)
    if opts.node_json:  # one line, for the srun that gathers every node's
        sys.stdout.write(" ".join(snapshot_json(machine, probe_stack()).split("\n")) + "\n")
        return EXIT_OK
    if opts.target:  # a profile to edit by hand: the fields exist, empty
        from dataclasses import replace

        from ..model.facts import HostFacts

        machine = replace(machine, host=HostFacts())
    machine = machine if opts.include_host else without_host_identity(machine)
    write_output(opts.output, snapshot_json(machine, probe_stack()) + "\n")
    if opts.output:
        print(f"wrote {opts.output} ({machine.describe()})", file=sys.stderr)
    return EXIT_OK


def without_host_identity(machine: MachineFacts) -> MachineFacts:
    """The machine with its host name, the user names (the session's, each GPU process's and port holder's) and
    its network addresses left out. What the checks need stays: whether a process is the user's own (`mine`),
    the interface names (NCCL_SOCKET_IFNAME), the scheduler's node names (MASTER_ADDR against the allocation)."""
    from dataclasses import replace

    host = machine.host
    if host is not None:
        host = replace(
            host,
            hostname="",
            user="",
            interfaces={name: () for name in host.interfaces},
            busy_ports=tuple(replace(b, user="") for b in host.busy_ports),
        )
    gpus = tuple(replace(g, processes=tuple(replace(p, user="") for p in g.processes)) for g in machine.gpus)
    nodes = tuple(without_host_identity(n) for n in machine.nodes)
    return replace(machine, host=host, gpus=gpus, nodes=nodes)
