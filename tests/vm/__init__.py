"""Tests of autobatch_vm.vm."""
