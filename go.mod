module github.com/syncgo/syncgo

go 1.26
