# all_reduce busbw vs message size, one line per implementation and rank count. Needs gnuplot
# (apt: gnuplot-nox). Called by run.sh: gnuplot -e "dir='OUT'" bench/collectives/plot.gp
# reads OUT/busbw_<impl>_<n>.dat (bytes, GB/s) and writes OUT/allreduce_busbw.png.
if (!exists("dir")) dir = "."
set terminal pngcairo size 1000,640
set output dir."/allreduce_busbw.png"
set title "all\\_reduce (sum, f32) bus bandwidth, one host: libdtrt over shared memory / sockets vs torch 1.13 gloo"
set logscale x 2
set xrange [3000:90000000]
set xlabel "message size"
set ylabel "busbw (GB/s) = algbw x 2(n-1)/n"
set xtics ("4 KiB" 4096, "16 KiB" 16384, "64 KiB" 65536, "256 KiB" 262144, \
  "1 MiB" 1048576, "4 MiB" 4194304, "16 MiB" 16777216, "64 MiB" 67108864)
set key top left
set grid
impls = "shm tcp torch-gloo"
ns = "2 4"
plot for [i=1:words(impls)] for [j=1:words(ns)] \
  dir."/busbw_".word(impls,i)."_".word(ns,j).".dat" using 1:2 with linespoints \
  lw 2 dt j lc i title word(impls,i)." n=".word(ns,j)
