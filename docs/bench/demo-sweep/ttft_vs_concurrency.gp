set terminal pngcairo size 900,600 enhanced font 'sans,11'
set output 'ttft_vs_concurrency.png'
set title 'ttft_vs_concurrency: sglang-oai demo in=256 out=64 ratio=1' noenhanced
set grid
set offsets graph 0.05, graph 0.08, graph 0.1, 0
set yrange [0:*]
set key top left
set logscale x 2
set xlabel 'max concurrency'
set ylabel 'TTFT (ms)'
plot 'sweep.dat' using 1:8 with linespoints title 'mean', 'sweep.dat' using 1:9 with linespoints title 'median', 'sweep.dat' using 1:10 with linespoints title 'p99'
