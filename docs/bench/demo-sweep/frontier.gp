set terminal pngcairo size 900,600 enhanced font 'sans,11'
set output 'frontier.png'
set title 'frontier: sglang-oai demo in=256 out=64 ratio=1' noenhanced
set grid
set offsets graph 0.05, graph 0.08, graph 0.1, 0
set yrange [0:*]
set key top left
set xlabel 'interactivity (tokens/s/user = 1000 / median TPOT)'
set ylabel 'throughput (output tokens/s/GPU, 1 GPU)'
set xrange [0:*]
set key bottom left
plot 'sweep.dat' using 7:6 with linespoints title 'max concurrency', 'sweep.dat' using 7:6:(sprintf('%d', $1)) with labels offset 1,0.8 notitle
