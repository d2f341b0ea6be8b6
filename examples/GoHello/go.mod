module example.com/gohello

go 1.19
