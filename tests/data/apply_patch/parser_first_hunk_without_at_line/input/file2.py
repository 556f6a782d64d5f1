import foo
x = 1
