# DDP training throughput (images/s over all ranks) for 1 and 2 ranks, one bar per
# implementation. Needs gnuplot (apt: gnuplot-nox). Called by run.sh:
#   gnuplot -e "data='FILE'; out='PNG'; titles='a;b;c'; subtitle='...'" bench/ddp/plot.gp
# FILE: lines "ranks images/s(impl 1) images/s(impl 2) ..." ("-" = not measured); titles: the
# implementations' labels, ';'-separated, '_' for spaces.
if (!exists("data")) data = "ddp_plot.dat"
if (!exists("out")) out = "ddp.png"
if (!exists("titles")) titles = "dtrun::ddp;no-overlap;PyTorch_DDP"
if (!exists("subtitle")) subtitle = ""
title_of(i) = system(sprintf("echo '%s' | cut -d';' -f%d | tr '_' ' '", titles, i))
count = int(system(sprintf("echo '%s' | tr -cd ';' | wc -c", titles)))
set terminal pngcairo size 900,560
set output out
set title "ResNet-18 (CIFAR) DDP training on CPU, one host, 2 cores\n".subtitle
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set datafile missing "-"
set ylabel "images/s, all ranks (higher is better)"
set xlabel "ranks"
set key outside bottom center horizontal
set grid ytics
set yrange [0:*]
plot for [i=1:count] data using (column(i + 1)):xtic(1) title title_of(i)
