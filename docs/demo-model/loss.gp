# gnuplot -c docs/demo-model/loss.gp  (run from docs/demo-model/): loss curves of the demo model's training run
set terminal pngcairo size 1000,720 font "sans,10"
set output "loss.png"
set datafile separator ","
set key autotitle columnhead
set multiplot layout 2,1 title "moeserve demo model (DeepSeek-V4 architecture, 11.3M params) on the Brown Corpus"
set lmargin 10
set ylabel "cross-entropy (nats/token)"
set xlabel "step (32 x 512 tokens)"
set grid
set yrange [1.5:9]
set arrow 1 from 460, graph 0 to 460, graph 1 nohead dashtype 2 lc rgb "gray40"
set label 1 "kept: step 460 (best validation)" at 470, 8.5
plot "train_log.csv" using 1:5 with lines lw 2 lc rgb "#1f77b4" title "train, main (next token)", \
     "" using 1:6 with lines lw 2 lc rgb "#ff7f0e" title "train, MTP (token after next)", \
     "" using 1:($8 > 0 ? $8 : 1/0) with linespoints pt 7 lw 2 lc rgb "#1f77b4" dashtype 2 title "validation, main", \
     "" using 1:($9 > 0 ? $9 : 1/0) with linespoints pt 5 lw 2 lc rgb "#ff7f0e" dashtype 2 title "validation, MTP"
unset arrow 1
unset label 1
set yrange [*:*]
set ylabel "indexer KL (nats)"
set y2label "expert load, max / mean"
set y2tics
set ytics nomirror
plot "train_log.csv" using 1:7 with lines lw 2 lc rgb "#2ca02c" title "lightning-indexer KL to the attention over its selection", \
     "" using 1:10 axes x1y2 with lines lw 1 lc rgb "#9467bd" title "max/mean expert load over the top-k routers (right axis)"
unset multiplot
