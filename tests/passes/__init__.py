"""Tests of autobatch_vm.passes."""
