class Other
    def method()
context
old
class BaseClass
    def method()
context
old
