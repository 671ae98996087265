#!/usr/bin/env python3
"""check_eplb_random.py --cases N -- COMMAND...: `COMMAND --weights W --num-replicas R --num-groups G --num-nodes N
--num-gpus P --output OUT` (a `deepinfer eplb plan`) over N random cases, each plan against this port of DeepSeek's
eplb.py (rebalance_experts; float64 where eplb.py computes in torch float32, so that both sides round alike: the
loads are random reals, without ties). Half the cases put one group on each node or one replica on each GPU, where
eplb.py keeps the order (balanced_packing with groups_per_pack == 1) instead of packing by weight."""
import json
import os
import random
import subprocess
import sys
import tempfile


def balanced_packing(weight, num_packs):
    rows, n = len(weight), len(weight[0])
    per_pack = n // num_packs
    if per_pack == 1:  # eplb.py: pack_index = arange, rank_in_pack = 0
        return [list(range(n)) for _ in range(rows)], [[0] * n for _ in range(rows)]
    pack = [[-1] * n for _ in range(rows)]
    rank = [[-1] * n for _ in range(rows)]
    for i in range(rows):
        order = sorted(range(n), key=lambda g: -weight[i][g])
        pack_weights, pack_items = [0.0] * num_packs, [0] * num_packs
        for g in order:
            p = min((q for q in range(num_packs) if pack_items[q] < per_pack), key=pack_weights.__getitem__)
            pack[i][g], rank[i][g] = p, pack_items[p]
            pack_weights[p] += weight[i][g]
            pack_items[p] += 1
    return pack, rank


def replicate_experts(weight, num_phy):
    rows, num_log = len(weight), len(weight[0])
    phy2log = [list(range(num_phy)) for _ in range(rows)]
    rank = [[0] * num_phy for _ in range(rows)]
    logcnt = [[1] * num_log for _ in range(rows)]
    for i in range(num_log, num_phy):
        for r in range(rows):
            best = max(range(num_log), key=lambda e: weight[r][e] / logcnt[r][e])
            phy2log[r][i], rank[r][i] = best, logcnt[r][best]
            logcnt[r][best] += 1
    return phy2log, rank, logcnt


def inverse(perm):
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


def hierarchical(weight, num_phy, num_groups, num_nodes, num_gpus):
    layers, num_log = len(weight), len(weight[0])
    group_size, groups_per_node = num_log // num_groups, num_groups // num_nodes
    phy_per_gpu, log_per_node, phy_per_node = num_phy // num_gpus, num_log // num_nodes, num_phy // num_nodes
    tokens_per_group = [[sum(row[g * group_size:(g + 1) * group_size]) for g in range(num_groups)] for row in weight]
    gpack, grank = balanced_packing(tokens_per_group, num_nodes)
    log2mlog = [[(gpack[l][e // group_size] * groups_per_node + grank[l][e // group_size]) * group_size + e % group_size
                 for e in range(num_log)] for l in range(layers)]
    mlog2log = [inverse(row) for row in log2mlog]
    tokens_per_mlog = [[weight[l][mlog2log[l][m]] for m in range(node * log_per_node, (node + 1) * log_per_node)]
                       for l in range(layers) for node in range(num_nodes)]
    phy2mlog, phyrank, mlogcnt = replicate_experts(tokens_per_mlog, phy_per_node)
    tokens_per_phy = [[tokens_per_mlog[r][phy2mlog[r][p]] / mlogcnt[r][phy2mlog[r][p]] for p in range(phy_per_node)]
                      for r in range(len(tokens_per_mlog))]
    pack, rank = balanced_packing(tokens_per_phy, num_gpus // num_nodes)
    phy2log = []
    for l in range(layers):
        row = []
        for node in range(num_nodes):
            r = l * num_nodes + node
            pphy2phy = inverse([pack[r][p] * phy_per_gpu + rank[r][p] for p in range(phy_per_node)])
            row += [mlog2log[l][phy2mlog[r][pphy2phy[q]] + node * log_per_node] for q in range(phy_per_node)]
        phy2log.append(row)
    return phy2log


def rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus):
    if num_groups % num_nodes == 0:
        return hierarchical(weight, num_replicas, num_groups, num_nodes, num_gpus)
    return hierarchical(weight, num_replicas, 1, 1, num_gpus)


def draw_case(rng, kind):
    """kind 0: one group a node; 1: one replica a GPU; 2: several of each; 3: groups that do not split over the
    nodes (eplb.py's flat form)."""
    num_nodes = rng.choice([1, 2, 4]) if kind != 3 else rng.choice([2, 4])
    num_groups = {0: num_nodes, 1: num_nodes * rng.choice([1, 2]), 2: num_nodes * rng.choice([2, 3]),
                  3: num_nodes + 1}[kind]
    num_log = num_groups * rng.choice([1, 2, 3, 4])
    if kind == 1:
        num_gpus = num_nodes * -(-num_log // num_nodes)  # at least one GPU an expert
        num_replicas = num_gpus
    else:
        num_gpus = num_nodes * rng.choice([1, 2, 4])
        num_replicas = num_gpus * (-(-num_log // num_gpus) + rng.choice([0, 0, 1, 2]))
    layers = rng.choice([1, 2, 3])
    weight = [[rng.uniform(0.0, 1000.0) for _ in range(num_log)] for _ in range(layers)]
    return weight, num_replicas, num_groups, num_nodes, num_gpus


def main():
    cases = int(sys.argv[sys.argv.index("--cases") + 1])
    command = sys.argv[sys.argv.index("--") + 1:]
    rng = random.Random(2024)
    mismatches, one_per_pack_cases = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for done in range(cases):
            weight, replicas, groups, nodes, gpus = draw_case(rng, done % 4)
            weights, out = os.path.join(tmp, "w.json"), os.path.join(tmp, "plan.json")
            with open(weights, "w") as f:
                json.dump({"weight": weight}, f)
            args = ["--weights", weights, "--num-replicas", str(replicas), "--num-groups", str(groups), "--num-nodes",
                    str(nodes), "--num-gpus", str(gpus), "--output", out]
            subprocess.run(command + args, check=True, capture_output=True, timeout=60)
            got = json.load(open(out))["phy2log"]
            want = rebalance_experts(weight, replicas, groups, nodes, gpus)
            hier = groups % nodes == 0
            single = (hier and groups // nodes == 1) or replicas // gpus == 1
            one_per_pack_cases += single
            if got != want:
                mismatches.append((len(weight), len(weight[0]), replicas, groups, nodes, gpus, single))
    print(f"{cases} random cases ({one_per_pack_cases} with one group a node or one replica a GPU): "
          f"{len(mismatches)} plans differ from eplb.py's")
    assert one_per_pack_cases >= cases // 4, one_per_pack_cases
    assert not mismatches, f"(layers, experts, replicas, groups, nodes, gpus, one-a-pack): {mismatches[:10]}"


if __name__ == "__main__":
    main()
