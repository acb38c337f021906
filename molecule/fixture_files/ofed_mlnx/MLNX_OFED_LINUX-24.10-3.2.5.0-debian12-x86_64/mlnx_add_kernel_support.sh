#!/bin/bash
# nodeforge fixture stand-in: the real script rebuilds the tarball's kernel packages for another kernel
# (mlnxofedinstall --add-kernel-support runs it). Here it does nothing.
echo "nodeforge fixture stand-in: no kernel packages to rebuild"
