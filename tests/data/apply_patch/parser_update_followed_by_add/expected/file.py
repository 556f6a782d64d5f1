x = 1
line
