# Rendezvous close time against the number of (simulated) nodes: dtrun's round protocol and
# torch 1.13's c10d rendezvous, log-log. Needs gnuplot (apt: gnuplot-nox). Called by run.sh:
#   gnuplot -e "dir='WORK'; out='PNG'" bench/rendezvous/plot.gp
# reads WORK/plot_dtrun.dat and WORK/plot_torch.dat (lines "nodes close_ms").
if (!exists("dir")) dir = "."
if (!exists("out")) out = "rendezvous.png"
set terminal pngcairo size 1000,600
set output out
set title "rendezvous: first join -> every node has its assignment (loopback, 2 cores)"
set logscale xy
set xlabel "nodes (threads simulating agents)"
set ylabel "close time (ms, lower is better)"
set xrange [4:30000]
set xtics (8, 64, 512, 4096, 16384)
set key top left
set grid
set arrow from 4,2000 to 30000,2000 nohead dt 2 lc rgb "#888888"
set label "target at 16,384 nodes: 2 s" at 6,2600 tc rgb "#666666"
plot dir."/plot_dtrun.dat" using 1:2 with linespoints lw 2 pt 7 title "dtrun keeper + store", \
  dir."/plot_torch.dat" using 1:2 with linespoints lw 2 pt 5 title "torch 1.13 c10d rendezvous"
