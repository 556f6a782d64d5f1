import foo
bar
x = 1
