"""Crash tests: real acode processes SIGKILLed at random moments and resumed until done."""
