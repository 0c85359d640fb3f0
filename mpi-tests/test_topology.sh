#!/bin/sh
# Proves: `roundpipe topology` reads hwloc XML files of realistic servers
# (tools/make_topology_fixtures.py) into link groups: four 2-GPU switches on
# two sockets (NUMA nodes named), two 4-GPU switches, one 4-GPU switch, GPUs
# straight on root ports (a group each); a partial topology (GPUs without a
# root port, a GPU without a bus id) falls back to a link of its own with a
# warning; a machine without GPUs says so; a file that is not XML is refused
# naming it. `roundpipe plan --topology` plans for the groups (JSON gives
# them and the deal; --deal interleaved deals 0 2 4 6 1 3 5 7), --gpus must
# agree with the file, and a topology without GPUs is refused.
# `roundpipe train --link-groups 0,0,1,1` (4 CPU executors as two link
# groups) arbitrates transfers across ranks: the waits are in the trace, and
# the model is bit-identical to the run without arbitration; a bad list is
# refused naming it.
# `roundpipe train --topology FILE.xml` (4 CPU executors as GPUs 0-3 of the
# file): the node leader reads the topology once and every rank gets its
# group (four 2-GPU switches: 0 0 1 1; two 4-GPU switches: 0 0 0 0) and
# its group's shared link over a GPU's own (x8 GPUs behind an x16 switch
# uplink: 2; `roundpipe topology` shows both speeds); with
# --deal interleaved (or a forced plan and --deal interleaved) executor 1
# runs on rank 2 (the trace shows F1 there) and run.json holds the deal
# 0 2 1 3, with the model bit-identical to the run without; a partial
# topology warns; a file that is not XML, one without GPUs, --topology
# with --link-groups and a bad --deal are refused naming them.
# --activation-numa reader on 8 CPU executors as the two-socket server's
# GPUs (ranks 0-3 on NUMA node 0, 4-7 on node 1), with 8 jobs on width 8 so
# job j always runs on rank j: the buffers read by jobs 1-3 (fwd_out of
# stages 0-2: 12 of 64 KiB, 0.75 MiB) are bound to node 0, those read by
# jobs 4-7 (fwd_out of stage 3, two checkpoints, three backward outputs: 24,
# 1.50 MiB) asked for node 1, which this machine lacks, and stay
# interleaved; the model is bit-identical to 4 ranks without it; with 4
# ranks and no topology nothing is bound; a bad value is refused.
# Ranks: 1, 2, 4 and 8 (mpirun inside).
set -u
. "$(dirname "$0")/testlib.sh"
fix="$src/mpi-tests/fixtures/topology"
topo() { "$bin" topology --topology "$fix/$1.xml" > "$tmp/$1.txt" 2>&1; }
has() { # FILE PATTERN WHAT
  grep -q -- "$2" "$tmp/$1.txt" && ok || { bad "$3"; cat "$tmp/$1.txt"; }
}
topo 8gpu-4switch && ok || bad "8gpu-4switch: exit status"
has 8gpu-4switch "8 GPU(s) in 4 link group(s)" "8gpu-4switch: not 4 groups"
has 8gpu-4switch "group 0: 2 GPUs share a link of 31.5 GB/s below root port 0000:00:01.0: GPU 0 (0000:03:00.0, NUMA node 0, own link 31.5 GB/s) GPU 1 (0000:04:00.0, NUMA node 0" "8gpu-4switch: group 0"
has 8gpu-4switch "group 3: .* GPU 6 (0000:11:00.0, NUMA node 1.* GPU 7 (0000:12:00.0, NUMA node 1" "8gpu-4switch: group 3 on socket 1"
topo 8gpu-2switch; has 8gpu-2switch "8 GPU(s) in 2 link group(s)" "8gpu-2switch: not 2 groups"
has 8gpu-2switch "group 1: 4 GPUs share a link of 31.5 GB/s below root port" "8gpu-2switch: group 1"
topo 4gpu-1switch; has 4gpu-1switch "4 GPU(s) in 1 link group(s)" "4gpu-1switch: not 1 group"
topo 4gpu-1switch-x8; has 4gpu-1switch-x8 "group 0: 4 GPUs share a link of 31.5 GB/s .*own link 15.8 GB/s" "4gpu-1switch-x8: speeds"
topo 4gpu-rootports; has 4gpu-rootports "4 GPU(s) in 4 link group(s)" "4gpu-rootports: not 4 groups"
has 4gpu-rootports "group 3: 1 GPU on a link of its own of 31.5 GB/s below root port 0000:00:04.0" "4gpu-rootports: group 3"
topo partial-nobridge && ok || bad "partial-nobridge: exit status"
has partial-nobridge "4 GPU(s) in 3 link group(s)" "partial-nobridge: not 3 groups"
has partial-nobridge "warning: GPU 2 (0000:00:05.0) has no PCIe root port above it (a missing bridge): it gets a link of its own" "partial-nobridge: no warning"
topo partial-nobusid; has partial-nobusid "warning: GPU 1 has no PCI bus id: it gets a link of its own" "partial-nobusid: no warning"
has partial-nobusid "GPU 1 (no bus id" "partial-nobusid: the GPU is not listed as without a bus id"
topo noGPU; has noGPU "0 GPU(s) in 0 link group(s)" "noGPU"
topo notxml && bad "a file that is not XML accepted" || has notxml "topology: --topology $fix/notxml.xml: hwloc cannot read it as XML" "notxml: message"
"$bin" topology --topology "$fix/8gpu-4switch.xml" --link-gbs 24 > "$tmp/lg.txt" 2>&1
has lg "group 0: 2 GPUs share a link of 24.0 GB/s" "--link-gbs does not override the speeds"

# the planner with a topology
layers="$src/bench/paper/qwen3-1.7b.txt"
"$bin" plan --layers "$layers" --topology "$fix/8gpu-4switch.xml" --deal interleaved --json > "$tmp/pi.txt" 2>&1
has pi '"gpus": 8,' "plan --topology: not 8 GPUs"
has pi '"link_groups": 4, "deal": \[0, 2, 4, 6, 1, 3, 5, 7\]' "plan --deal interleaved: the deal"
"$bin" plan --layers "$layers" --topology "$fix/8gpu-2switch.xml" > "$tmp/pb.txt" 2>&1
has pb "topology: 2 link group(s), \(natural\|interleaved\) deal: executor -> GPU" "plan --topology: no topology line"
"$bin" plan --layers "$layers" --topology "$fix/8gpu-4switch.xml" --gpus 4 > "$tmp/pg.txt" 2>&1 && bad "--gpus 4 with 8 GPUs accepted" ||
  has pg "gpus 4, but --topology $fix/8gpu-4switch.xml has 8 GPUs" "--gpus mismatch: message"
"$bin" plan --layers "$layers" --topology "$fix/noGPU.xml" > "$tmp/pn.txt" 2>&1 && bad "a topology without GPUs accepted" ||
  has pn "topology $fix/noGPU.xml: no GPU in it" "no GPU: message"
"$bin" plan --layers "$layers" --topology "$fix/8gpu-4switch.xml" --deal sideways > "$tmp/pd.txt" 2>&1 && bad "--deal sideways accepted" ||
  has pd "deal: 'sideways' is not natural, interleaved or best" "--deal: message"

# transfer arbitration across the ranks of a link group, on CPU executors
export OMP_NUM_THREADS=1
data="$build/examples/data/gnu-licenses.npy"
tr="--init-config $src/examples/tiny-config.json --data $data --seq-len 64 --batch-size 8 --microbatches 4 --steps 6 --lr 3e-3 --seed 1 --threads 1 --progress none --device cpu --chunk-mib 0.01"
${MPIRUN:-mpirun} $flags -np 4 "$bin" train $tr --save "$tmp/off" > "$tmp/off.txt" 2>&1 || { bad "run without link groups"; cat "$tmp/off.txt"; }
${MPIRUN:-mpirun} $flags -np 4 "$bin" train $tr --link-groups 0,0,1,1 --save "$tmp/on" --trace "$tmp/on.json" > "$tmp/on.txt" 2>&1 ||
  { bad "run with --link-groups 0,0,1,1"; cat "$tmp/on.txt"; }
cmp -s "$tmp/off/model.safetensors" "$tmp/on/model.safetensors" && ok || bad "arbitration changed the model"
grep -q "waits for a peer's urgent transfer" "$tmp/on.json" && ok || bad "no link wait in the trace"
${MPIRUN:-mpirun} $flags -np 2 "$bin" train $tr --link-groups 0,0,1 > "$tmp/lg3.txt" 2>&1 && bad "3 groups for 2 ranks accepted" ||
  has lg3 "link-groups 0,0,1: 3 entries, but the node has 2 ranks" "--link-groups length: message"
${MPIRUN:-mpirun} $flags -np 2 "$bin" train $tr --link-groups 0,x > "$tmp/lgx.txt" 2>&1 && bad "a bad group accepted" ||
  has lgx "link-groups 0,x: entry 2 is not a group number" "--link-groups entry: message"
for lg in "0, 1" "+0,1" "0,-1" "0,1," ",0,1"; do
  ${MPIRUN:-mpirun} $flags -np 2 "$bin" train $tr --link-groups "$lg" > "$tmp/lgs.txt" 2>&1 && bad "--link-groups '$lg' accepted" ||
    has lgs "is not a group number" "--link-groups '$lg': message"
done
# the node leader's topology and the deal, on CPU executors
${MPIRUN:-mpirun} $flags -np 4 "$bin" train $tr --topology "$fix/8gpu-4switch.xml" --deal interleaved --save "$tmp/dl" --trace "$tmp/dl.json" --log "$tmp/dl.log" > "$tmp/dl.txt" 2>&1 ||
  { bad "run with --topology --deal interleaved"; cat "$tmp/dl.txt"; }
has dl "PCIe link groups (--topology $fix/8gpu-4switch.xml): node rank -> group 0 0 1 1; shared links 1 1 x a GPU's own" "--topology: the ranks' groups"
has dl "interleaved deal over 2 PCIe link groups: executor -> node rank 0 2 1 3" "--deal interleaved: the deal logged"
cmp -s "$tmp/off/model.safetensors" "$tmp/dl/model.safetensors" && ok || bad "the interleaved deal changed the model"
grep -q '"name":"F1 m0 (it 1)","pid":2,' "$tmp/dl.json" && ok || bad "F1 of step 1 did not run on rank 2"
grep -q '"deal":\[0,2,1,3\]' "$tmp/dl.log.run.json" && ok || { bad "run.json: no deal 0 2 1 3"; cat "$tmp/dl.log.run.json"; }
plan="fwd=0,1,2,3;bwd=4-5,3,2,1,0"
${MPIRUN:-mpirun} $flags -np 4 "$bin" train $tr --topology "$fix/8gpu-4switch.xml" --plan "$plan" --deal interleaved > "$tmp/dp.txt" 2>&1 ||
  { bad "a forced plan with --deal interleaved"; cat "$tmp/dp.txt"; }
has dp "interleaved deal over 2 PCIe link groups: executor -> node rank 0 2 1 3" "forced plan: --deal interleaved not taken"
${MPIRUN:-mpirun} $flags -np 4 "$bin" train $tr --topology "$fix/8gpu-4switch.xml" --plan "$plan" --trace "$tmp/dn.json" > "$tmp/dn.txt" 2>&1 ||
  { bad "a forced plan with the default deal"; cat "$tmp/dn.txt"; }
has dn "natural deal over 2 PCIe link groups: executor -> node rank 0 1 2 3" "forced plan: the default deal is not natural"
grep -q '"name":"F1 m0 (it 1)","pid":1,' "$tmp/dn.json" && ok || bad "natural deal: F1 of step 1 not on rank 1"
${MPIRUN:-mpirun} $flags -np 4 "$bin" train $tr --steps 1 --topology "$fix/8gpu-2switch.xml" > "$tmp/d2.txt" 2>&1 ||
  { bad "run with two 4-GPU switches"; cat "$tmp/d2.txt"; }
has d2 "node rank -> group 0 0 0 0" "--topology 8gpu-2switch: not one group"
${MPIRUN:-mpirun} $flags -np 4 "$bin" train $tr --steps 1 --topology "$fix/partial-nobridge.xml" > "$tmp/dw.txt" 2>&1 ||
  { bad "run with a partial topology"; cat "$tmp/dw.txt"; }
has dw "node rank -> group 0 0 1 2" "partial topology: groups"
${MPIRUN:-mpirun} $flags -np 2 "$bin" train $tr --steps 1 --topology "$fix/4gpu-1switch-x8.xml" > "$tmp/d8.txt" 2>&1 ||
  { bad "run with x8 GPUs behind an x16 switch"; cat "$tmp/d8.txt"; }
has d8 "node rank -> group 0 0; shared links 2 x a GPU's own" "x8 GPUs behind x16: the shared link is not 2x"
has dw "warning: PCIe topology (--topology $fix/partial-nobridge.xml): GPU 2 (0000:00:05.0) has no PCIe root port" "partial topology: no warning"
${MPIRUN:-mpirun} $flags -np 2 "$bin" train $tr --topology "$fix/notxml.xml" > "$tmp/dx.txt" 2>&1 && bad "train --topology: not XML accepted" ||
  has dx "topology $fix/notxml.xml: hwloc cannot read it as XML" "train --topology not XML: message"
${MPIRUN:-mpirun} $flags -np 2 "$bin" train $tr --topology "$fix/noGPU.xml" > "$tmp/dg.txt" 2>&1 && bad "train --topology without GPUs accepted" ||
  has dg "topology $fix/noGPU.xml: no GPU in it" "train --topology without GPUs: message"
"$bin" train $tr --topology "$fix/8gpu-4switch.xml" --link-groups 0 > "$tmp/db.txt" 2>&1 && bad "--topology with --link-groups accepted" ||
  has db "link-groups and --topology both say" "--topology with --link-groups: message"
# --recompute stage: the figures below are the hand-overs and checkpoints of this plan
# (auto would add kept blocks, whose areas --activation-numa leaves interleaved): buffers
# of 0.25 MiB (4 microbatches of T x H fp32), fewer since a backward stage's checkpoint is
# the forward output it equals and the input gradients take turns in two buffers
# (engine/arena.h): 5 asked, 3 bound and 2 on NUMA nodes this machine lacks, and the input
# gradients' shared buffer, read from several nodes, left interleaved
${MPIRUN:-mpirun} $flags -np 8 "$bin" train $tr --topology "$fix/8gpu-4switch.xml" --activation-numa reader --plan "fwd=0,1,2,3;bwd=4-5,3,2,0-1" --recompute stage --deal natural --save "$tmp/an" > "$tmp/an.txt" 2>&1 ||
  { bad "run with --activation-numa reader"; cat "$tmp/an.txt"; }
has an "activation buffers on their readers' NUMA node: 0.75 MiB bound of 1.25 MiB asked; 0.25 MiB read from several nodes stay interleaved; left interleaved: 0.50 MiB on nodes this machine lacks" "--activation-numa reader: the buffers' nodes"
cmp -s "$tmp/off/model.safetensors" "$tmp/an/model.safetensors" && ok || bad "--activation-numa reader changed the model"
${MPIRUN:-mpirun} $flags -np 4 "$bin" train $tr --steps 1 --activation-numa reader > "$tmp/an0.txt" 2>&1 ||
  { bad "--activation-numa reader without a topology"; cat "$tmp/an0.txt"; }
has an0 "0.00 MiB bound of 0.00 MiB asked (no rank's GPU has a known NUMA node: give --topology)" "--activation-numa without a topology: message"
"$bin" train $tr --activation-numa sideways > "$tmp/as.txt" 2>&1 && bad "--activation-numa sideways accepted" ||
  has as "activation-numa: 'sideways' is not one of interleave, reader" "--activation-numa: message"
"$bin" train $tr --deal sideways > "$tmp/ds.txt" 2>&1 && bad "train --deal sideways accepted" ||
  has ds "deal: 'sideways' is not natural, interleaved or best" "train --deal: message"
finish
