module github.com/unique-sessions/unique-go

go 1.19
