# Launch latencies, dtrun against torchrun 1.13, one pair of bars per (metric, N), log scale.
# Needs gnuplot (apt: gnuplot-nox). Called by run.sh:
#   gnuplot -e "data='FILE'; out='PNG'" bench/launch/plot.gp
# FILE: lines "metric/N dtrun_ms torchrun_ms" (medians).
if (!exists("data")) data = "plot.dat"
if (!exists("out")) out = "launch.png"
set terminal pngcairo size 1100,560
set output out
set title "launch, exit and restart latency (medians; N = --nproc\\_per\\_node; 2 shared cores)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set logscale y
set ylabel "ms (log scale, lower is better)"
set xtics rotate by -30
set key top left
set grid ytics
plot data using 2:xtic(1) title "dtrun" lc rgb "#1f77b4", \
  "" using 3 title "torchrun 1.13" lc rgb "#d62728"
