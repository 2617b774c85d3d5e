# Store server CPU per 1000 ops, dtrun against torch 1.13's TCPStore server, one pair of bars per
# (op, clients) cell. Needs gnuplot (apt: gnuplot-nox). Called by run.sh:
#   gnuplot -e "data='FILE'; out='PNG'" bench/store/plot.gp
# FILE: lines "op/clients dtrun_ms torch_ms" (CPU-milliseconds per 1000 ops).
if (!exists("data")) data = "store_cpu.dat"
if (!exists("out")) out = "store.png"
set terminal pngcairo size 1000,560
set output out
set title "store server CPU per 1000 ops (utime + stime of the server process), loopback, 2 cores"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set ylabel "server CPU-ms per 1000 ops (lower is better)"
set xlabel "op / client processes"
set xtics rotate by -30
set key top left
set grid ytics
set yrange [0:*]
plot data using 2:xtic(1) title "dtrun store" lc rgb "#1f77b4", \
  "" using 3 title "torch 1.13 TCPStore" lc rgb "#d62728"
