#!/usr/bin/env python3
"""Scenario files nobody tuned for: random variants of every family the
engine serves, drawn from a printed seed, for `heldout.sh` to run the
engine's goodput beside the simulator's on each.

    perf/scripts/heldout.py SEED OUT_DIR [PER_FAMILY]

Families (PER_FAMILY files each, default 2): static models under one of
the static policies (Symphony and its baselines), Orloj's dynamic model
with 2-3 applications, a Nexus query tree (chain or fork, DP split), glet's
partition policies on the measured profiles, a supernet under
SuperServe's policies, a Nexus prefix group (variants sharing a prefix,
beside models of their own), and a mix that shifts over the run (drawn
per-minute traces written beside the files) under a policy that re-plans
every epoch (Nexus, or a partition policy on the measured profiles).
Profiles, SLOs, GPU counts, arrival processes and seeds are drawn; every SLO leaves room for at least a few batches of the
slowest model it serves. The same seed writes the same files.
"""
import os
import random
import sys

STATIC = ["symphony", "symphony-wc", "clockwork", "nexus", "nexus-lazy", "clipper"]
DYNAMIC = ["orloj", "orloj", "clockwork"]
PARTITIONS = ["glet", "glet-noint", "sbp", "greedy-part"]
SUPERNET = ["slackfit", "slackfit", "max-acc", "min-acc", "max-batch", "fixed-3"]
PROFILED = ["densenet121", "inception", "mobilenet", "resnet50", "resnet101", "vgg16"]


def arrival(r):
    return r.choice([
        "poisson",
        "poisson",
        "uniform",
        "gamma:%.2f" % r.uniform(0.3, 3),
        "bursty:%.2f,%d" % (r.uniform(0.1, 0.5), r.randint(2, 4)),
    ])


def head(r, name, gpus, extra=""):
    return (f'name = "{name}"\nseed = {r.randint(1, 999)}\nduration_s = 6\nwarmup_s = 1\n\n'
            f'[cluster]\ngpus = {gpus}\nctrl_delay_us = {r.choice([0, 100, 200])}\n{extra}\n')


def static(r, name):
    s = head(r, name, r.randint(2, 12))
    for m in range(r.randint(1, 6)):
        a, b = r.uniform(0.5, 5), r.uniform(2, 15)
        slo = (a * r.randint(4, 16) + b) * r.uniform(1.5, 3)
        s += (f'[[models]]\nname = "m{m}"\nalpha_ms = {a:.3f}\nbeta_ms = {b:.3f}\nslo_ms = {slo:.1f}\n'
              f'weight = {r.uniform(0.2, 2):.2f}\narrival = "{arrival(r)}"\n\n')
    return s + f'[policy]\nname = "{r.choice(STATIC)}"\n'


def dynamic(r, name):
    s = head(r, name, r.randint(2, 8))
    s += (f'[[models]]\nname = "dyn"\nslo_p99_multiple = {r.uniform(1.3, 3):.2f}\nkappa = {r.uniform(0.05, 0.6):.2f}\n'
          f'max_batch = {r.choice([8, 16, 32])}\nweight = 1.0\narrival = "poisson"\n\n')
    for a in range(r.randint(2, 3)):
        mu = r.uniform(3, 50)
        s += (f'[[models.apps]]\nname = "app{a}"\nweight = {r.uniform(0.2, 1):.2f}\n'
              f'exec_ms = "normal:{mu:.1f},{mu * r.uniform(0.05, 0.2):.2f}"\n\n')
    return s + f'[policy]\nname = "{r.choice(DYNAMIC)}"\n'


def query(r, name):
    s = head(r, name, r.randint(6, 16))
    n = r.randint(2, 4)
    for m in range(n):
        s += f'[[models]]\nname = "q{m}"\nalpha_ms = {r.uniform(0.5, 6):.3f}\nbeta_ms = {r.uniform(3, 12):.3f}\n\n'
    s += (f'[[queries]]\nname = "q"\nslo_ms = {r.uniform(250, 500):.1f}\narrival = "poisson"\nsplit = "dp"\n\n'
          '[[queries.stages]]\nmodel = "q0"\n\n')
    for m in range(1, n):
        s += (f'[[queries.stages]]\nmodel = "q{m}"\nparent = "q{r.randint(0, m - 1)}"\n'
              f'gamma = {r.uniform(0.5, 3):.1f}\n\n')
    return s + '[policy]\nname = "nexus"\n'


def solo_ms(profiles):
    """Each profiled model's latency alone at batch 1 on a whole GPU, ms."""
    out = {}
    for line in open(os.path.join(profiles, "inference.csv")):
        w = line.strip().split(",")
        if len(w) >= 7 and w[1] == "1" and w[2] == "100":
            out[w[0]] = 1000 * float(w[6])
    return out


def partitions(r, name, profiles):
    solo = solo_ms(profiles)
    s = head(r, name, r.randint(2, 6), f'partition_profiles = "{profiles}"\n')
    for m in range(r.randint(2, 5)):
        # Nexus's duty cycle needs a batch within half the SLO: 3-8 times
        # the model alone leaves room for batches.
        profile = r.choice(PROFILED)
        s += (f'[[models]]\nname = "g{m}"\nprofile = "{profile}"\n'
              f'slo_ms = {solo[profile] * r.uniform(3, 8):.1f}\nweight = {r.uniform(0.3, 2):.2f}\n\n')
    return s + f'[policy]\nname = "{r.choice(PARTITIONS)}"\n'


def supernet(r, name):
    s = head(r, name, r.randint(2, 10)).replace("warmup_s = 1\n", f"warmup_s = 1\nrate_rps = {r.randint(1000, 8000)}\n")
    s += (f'[[models]]\nname = "sn"\nsupernet = "default"\nmax_batch = {r.choice([16, 32])}\n'
          f'slo_ms = {r.uniform(25, 60):.1f}\narrival = "{arrival(r)}"\n\n')
    return s + f'[policy]\nname = "{r.choice(SUPERNET)}"\n'


def prefix(r, name):
    s = head(r, name, r.randint(1, 4))
    pa, pb = r.uniform(0.5, 2), r.uniform(2, 8)
    sa, sb = r.uniform(0.05, 0.5), r.uniform(0.2, 2)
    slo = ((pa + sa) * r.randint(8, 24) + pb + sb) * r.uniform(2, 3)
    s += f'[[prefixes]]\nname = "trunk"\nalpha_ms = {pa:.3f}\nbeta_ms = {pb:.3f}\n\n'
    for v in range(r.randint(2, 8)):
        s += (f'[[models]]\nname = "v{v}"\nprefix_of = "trunk"\nalpha_ms = {sa * r.uniform(0.7, 1.3):.3f}\n'
              f'beta_ms = {sb * r.uniform(0.7, 1.3):.3f}\nslo_ms = {slo:.1f}\nweight = {r.uniform(0.2, 2):.2f}\n'
              f'arrival = "{arrival(r)}"\n\n')
    for m in range(r.randint(0, 2)):
        a, b = r.uniform(0.2, 2), r.uniform(1, 6)
        s += (f'[[models]]\nname = "own{m}"\nalpha_ms = {a:.3f}\nbeta_ms = {b:.3f}\n'
              f'slo_ms = {(a * r.randint(8, 24) + b) * r.uniform(2, 3):.1f}\nweight = {r.uniform(0.2, 2):.2f}\n\n')
    return s + '[policy]\nname = "nexus"\n'


def shape(r, path):
    """A day of per-minute invocations (the Azure schema the traces use):
    straight lines between 3-6 drawn levels, a 10x swing at most."""
    knots = sorted(r.sample(range(1, 1439), r.randint(1, 4))) + [1439]
    levels = [r.uniform(10, 100) for _ in range(len(knots) + 1)]
    at, row = 0, []
    for k, (lo, hi) in zip(knots, zip(levels, levels[1:])):
        n = k - at + (1 if not row else 0)
        row += [round(lo + (hi - lo) * i / max(n - 1, 1)) for i in range(n)]
        at = k
    assert len(row) == 1440, len(row)
    with open(path, "w") as f:
        f.write("HashOwner,HashApp,HashFunction,Trigger," + ",".join(str(i + 1) for i in range(1440)) + "\n")
        f.write("o,a,f,http," + ",".join(str(v) for v in row) + "\n")


def epochs(r, name, profiles, out):
    glet = r.random() < 0.5
    extra = f'partition_profiles = "{profiles}"\n' if glet else ""
    s = head(r, name, r.randint(2, 8), extra).replace("duration_s = 6", "duration_s = 8")
    solo = solo_ms(profiles)
    for m in range(r.randint(2, 4)):
        trace = f"{name}-m{m}.csv"
        shape(r, os.path.join(out, trace))
        if glet:
            profile = r.choice(PROFILED)
            law = f'profile = "{profile}"\nslo_ms = {solo[profile] * r.uniform(3, 8):.1f}\n'
        else:
            a, b = r.uniform(0.5, 5), r.uniform(2, 15)
            law = f'alpha_ms = {a:.3f}\nbeta_ms = {b:.3f}\nslo_ms = {(a * r.randint(4, 16) + b) * r.uniform(1.5, 3):.1f}\n'
        s += f'[[models]]\nname = "e{m}"\n{law}weight = {r.uniform(0.3, 2):.2f}\narrival = "trace:{trace}"\n\n'
    policy = r.choice(PARTITIONS) if glet else "nexus"
    return s + f'[policy]\nname = "{policy}"\nepoch_s = {r.uniform(0.5, 2.5):.1f}\n'


def main():
    seed, out = int(sys.argv[1]), sys.argv[2]
    per = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    profiles = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "partition-profiles")
    r = random.Random(seed)
    os.makedirs(out, exist_ok=True)
    makers = [("static", static), ("dynamic", dynamic), ("query", query),
              ("partitions", lambda r, n: partitions(r, n, os.path.normpath(profiles))), ("supernet", supernet),
              ("prefix", prefix), ("epochs", lambda r, n: epochs(r, n, os.path.normpath(profiles), out))]
    for family, make in makers:
        for k in range(per):
            name = f"heldout-{seed}-{family}-{k}"
            path = os.path.join(out, name + ".toml")
            with open(path, "w") as f:
                f.write(f"# perf/scripts/heldout.py {seed}: {family} variant {k}\n" + make(r, name))
            print(path)


if __name__ == "__main__":
    main()
