#!/bin/bash
# Same logic as Mellanox nv_peer_memory's create_nv.symvers.sh (nodeforge fixture): collect the symbol versions of
# nvidia_p2p_* from the installed nvidia module into nv.symvers.

MOD_SYMVERS=nv.symvers
KVER=${1:-$(uname -r)}

nvidia_mod=
for mod in nvidia $(ls /lib/modules/$KVER/updates/dkms/nvidia*.ko 2>/dev/null)
do
	nvidia_mod=$(/sbin/modinfo -F filename -k "$KVER" $mod 2>/dev/null)
	if [ ! -e "$nvidia_mod" ]; then
		continue
	fi
	if ! (nm -o $nvidia_mod | grep -q " nvidia_p2p_"); then
		continue
	fi

	echo "Getting symbol versions from $nvidia_mod ..."
	echo -n "" > $MOD_SYMVERS
	while read -r line
	do
		file=$(echo $line | cut -f1 -d: | sed -e 's@\./@@' -e 's@.ko@@' -e "s@$PWD/@@")
		crc=$(echo $line | cut -f2 -d: | cut -f1 -d" ")
		sym=$(echo $line | cut -f2 -d: | cut -f3 -d" " | sed -e 's/__crc_//g')
		echo -e "0x$crc\t$sym\t$file" >> $MOD_SYMVERS
	done < <(nm -o $nvidia_mod | grep "__crc_nvidia_p2p_")

	echo "Created: ${MOD_SYMVERS}"
	exit 0
done

if [ ! -e "$nvidia_mod" ]; then
	echo "-E- Cannot locate nvidia modules!" >&2
	echo "CUDA driver must be installed before installing this package!" >&2
	exit 1
fi
