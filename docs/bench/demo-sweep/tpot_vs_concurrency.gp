set terminal pngcairo size 900,600 enhanced font 'sans,11'
set output 'tpot_vs_concurrency.png'
set title 'tpot_vs_concurrency: sglang-oai demo in=256 out=64 ratio=1' noenhanced
set grid
set offsets graph 0.05, graph 0.08, graph 0.1, 0
set yrange [0:*]
set key top left
set logscale x 2
set xlabel 'max concurrency'
set ylabel 'TPOT (ms)'
plot 'sweep.dat' using 1:11 with linespoints title 'mean', 'sweep.dat' using 1:12 with linespoints title 'median', 'sweep.dat' using 1:13 with linespoints title 'p99'
