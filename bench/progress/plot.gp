# The Python hook's cost: per-call time of a 4-float gloo all_reduce, plain and through dtrun's
# hook, per block of calls (same processes, alternating). Needs gnuplot (apt: gnuplot-nox).
# Called by run_torch_hook.sh: gnuplot -e "data='FILE'; out='PNG'" bench/progress/plot.gp
# FILE: lines "block plain_us hooked_us".
if (!exists("data")) data = "hook_bench.dat"
if (!exists("out")) out = "progress.png"
set terminal pngcairo size 900,520
set output out
set title "all\\_reduce of 4 floats, 2 ranks, torch 1.13 gloo: plain against dtrun's progress hook"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set ylabel "us per call (lower is better)"
set xlabel "block of calls (alternating plain / hooked)"
set key top left
set grid ytics
set yrange [0:*]
plot data using 2:xtic(1) title "plain dist.all\\_reduce" lc rgb "#d62728", \
  "" using 3 title "with dtrun's hook" lc rgb "#1f77b4"
