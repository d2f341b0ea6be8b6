module goplugin

go 1.19
