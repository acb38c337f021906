/* nodeforge stand-in for nvidia.ko: /proc/driver/nvidia/version as the driver writes it, /dev/nvidiactl (a process
 * that holds it open keeps the module in use, as a GPU job does), and the symbols the other modules import. */
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/proc_fs.h>
#include <linux/seq_file.h>
#include "nv-standin.h"

static struct proc_dir_entry *nv_proc_dir;

static int nv_version_show(struct seq_file *m, void *v)
{
	seq_printf(m, "NVRM version: %s  %s  Release Build  (nodeforge@standin)  Thu Jan  1 00:00:00 UTC 2026\n",
		   NV_ID, NV_VERSION);
	seq_printf(m, "GCC version:  gcc version %s\n", __VERSION__);
	return 0;
}

static int nv_ctl_open(struct inode *inode, struct file *file)
{
	return 0;
}

static const struct file_operations nv_ctl_fops = {
	.owner = THIS_MODULE,
	.open = nv_ctl_open,
	.llseek = noop_llseek,
};

static struct miscdevice nv_ctl = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "nvidiactl",
	.fops = &nv_ctl_fops,
};

int nvidia_get_rm_ops(void)
{
	return 0;
}
EXPORT_SYMBOL(nvidia_get_rm_ops);

int nvUvmInterfaceRegisterUvmCallbacks(void)
{
	return 0;
}
EXPORT_SYMBOL(nvUvmInterfaceRegisterUvmCallbacks);

int nvidia_p2p_get_pages(void)
{
	return 0;
}
EXPORT_SYMBOL(nvidia_p2p_get_pages);

static int nv_standin_init(void)
{
	int rc;

	nv_proc_dir = proc_mkdir("driver/nvidia", NULL);
	if (!nv_proc_dir)
		return -ENOMEM;
	if (!proc_create_single("version", 0444, nv_proc_dir, nv_version_show)) {
		proc_remove(nv_proc_dir);
		return -ENOMEM;
	}
	rc = misc_register(&nv_ctl);
	if (rc)
		proc_remove(nv_proc_dir);
	return rc;
}

static void nv_standin_exit(void)
{
	misc_deregister(&nv_ctl);
	proc_remove(nv_proc_dir);
}

NV_STANDIN_MODULE("kernel module (nvidia.ko)");
