/*
 * VK_LAYER_DEVSEL_pick: an instance-only Vulkan layer that shows the application
 * ONE physical device, chosen by environment variables read at vkCreateInstance:
 *
 *   DEVSEL_INDEX=N          0-based index into the list the next layer/loader returns
 *                           (loader >= 1.3.204 sorts by device type, then PCI domain/bus/dev/fn)
 *   DEVSEL_PCI=dddd:bb:dd.f PCI address (needs VK_EXT_pci_bus_info; NVIDIA has it). Wins over INDEX.
 *   DEVSEL_TAG=1            append " [vkN]" (N = that raw index) to every deviceName, so that
 *                           dawn.node's create(['adapter=[vk1]']) substring match can pick one
 *                           of several identically named GPUs (no filtering in this mode unless
 *                           INDEX/PCI are set too)
 *   DEVSEL_DEBUG=1          list the devices seen and the choice on stderr
 *
 * Neither set: the layer passes everything through. A selector that matches nothing
 * yields zero devices (Dawn's requestAdapter then resolves to null).
 * Because the variables are read per vkCreateInstance, one process can make two
 * VkInstances that each see a different GPU by changing the env between them.
 *
 * Same shape as Mesa's VK_LAYER_MESA_device_select (instance-only layer, no
 * vkGetDeviceProcAddr, so the loader leaves it out of device chains).
 */
#include <vulkan/vk_layer.h>
#include <vulkan/vulkan.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

struct inst {
  VkInstance instance;
  PFN_vkGetInstanceProcAddr gipa;
  PFN_vkDestroyInstance DestroyInstance;
  PFN_vkEnumeratePhysicalDevices EnumeratePhysicalDevices;
  PFN_vkEnumeratePhysicalDeviceGroups EnumeratePhysicalDeviceGroups;
  PFN_vkGetPhysicalDeviceProperties GetPhysicalDeviceProperties;
  PFN_vkGetPhysicalDeviceProperties2 GetPhysicalDeviceProperties2;
  PFN_vkEnumerateDeviceExtensionProperties EnumerateDeviceExtensionProperties;
  int index;      /* -1: unset */
  int has_pci;    /* DEVSEL_PCI given */
  unsigned pci[4];
  int debug;
  int tag;
  PFN_vkGetPhysicalDeviceProperties2 GetPhysicalDeviceProperties2KHR;
  struct inst *next;
};

static struct inst *g_list;
/* DEVSEL_TAG: raw index of each physical device handle seen (handles below the layer are unique). */
struct tagent { VkPhysicalDevice pd; struct inst *s; int idx; };
static struct tagent g_tags[256];
static int g_ntags;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static struct inst *find(VkInstance i) {
  pthread_mutex_lock(&g_mu);
  struct inst *p = g_list;
  while (p && p->instance != i) p = p->next;
  pthread_mutex_unlock(&g_mu);
  return p;
}

static VKAPI_ATTR VkResult VKAPI_CALL ds_CreateInstance(const VkInstanceCreateInfo *ci,
                                                        const VkAllocationCallbacks *alloc,
                                                        VkInstance *out) {
  VkLayerInstanceCreateInfo *chain = (VkLayerInstanceCreateInfo *)ci->pNext;
  while (chain && !(chain->sType == VK_STRUCTURE_TYPE_LOADER_INSTANCE_CREATE_INFO &&
                    chain->function == VK_LAYER_LINK_INFO))
    chain = (VkLayerInstanceCreateInfo *)chain->pNext;
  if (!chain || !chain->u.pLayerInfo) return VK_ERROR_INITIALIZATION_FAILED;
  PFN_vkGetInstanceProcAddr gipa = chain->u.pLayerInfo->pfnNextGetInstanceProcAddr;
  PFN_vkCreateInstance create = (PFN_vkCreateInstance)gipa(NULL, "vkCreateInstance");
  if (!create) return VK_ERROR_INITIALIZATION_FAILED;
  chain->u.pLayerInfo = chain->u.pLayerInfo->pNext;
  VkResult r = create(ci, alloc, out);
  if (r != VK_SUCCESS) return r;

  struct inst *s = calloc(1, sizeof *s);
  if (!s) return VK_ERROR_OUT_OF_HOST_MEMORY;
  s->instance = *out;
  s->gipa = gipa;
#define GET(f) s->f = (PFN_vk##f)gipa(*out, "vk" #f)
  GET(DestroyInstance);
  GET(EnumeratePhysicalDevices);
  GET(EnumeratePhysicalDeviceGroups);
  GET(GetPhysicalDeviceProperties);
  GET(GetPhysicalDeviceProperties2);
  GET(EnumerateDeviceExtensionProperties);
  s->GetPhysicalDeviceProperties2KHR = (PFN_vkGetPhysicalDeviceProperties2)gipa(*out, "vkGetPhysicalDeviceProperties2KHR");
#undef GET
  s->index = -1;
  const char *e = getenv("DEVSEL_INDEX");
  if (e && *e) s->index = atoi(e);
  e = getenv("DEVSEL_PCI");
  if (e && *e && sscanf(e, "%x:%x:%x.%x", &s->pci[0], &s->pci[1], &s->pci[2], &s->pci[3]) == 4)
    s->has_pci = 1;
  e = getenv("DEVSEL_TAG");
  s->tag = e && *e && strcmp(e, "0");
  e = getenv("DEVSEL_DEBUG");
  s->debug = e && *e && strcmp(e, "0");
  /* Vulkan 1.1 entry point needs the app to ask for >= 1.1 to be safe to call. */
  if (!(ci->pApplicationInfo && ci->pApplicationInfo->apiVersion >= VK_API_VERSION_1_1))
    s->GetPhysicalDeviceProperties2 = NULL;
  if (s->debug)
    fprintf(stderr, "[devsel] vkCreateInstance: DEVSEL_INDEX=%d DEVSEL_PCI=%s\n", s->index,
            s->has_pci ? getenv("DEVSEL_PCI") : "(unset)");
  pthread_mutex_lock(&g_mu);
  s->next = g_list;
  g_list = s;
  pthread_mutex_unlock(&g_mu);
  return VK_SUCCESS;
}

static VKAPI_ATTR void VKAPI_CALL ds_DestroyInstance(VkInstance i, const VkAllocationCallbacks *a) {
  pthread_mutex_lock(&g_mu);
  struct inst **pp = &g_list, *s = NULL;
  while (*pp && (*pp)->instance != i) pp = &(*pp)->next;
  if (*pp) { s = *pp; *pp = s->next; }
  for (int k = 0; k < g_ntags;)
    if (g_tags[k].s == s) g_tags[k] = g_tags[--g_ntags]; else k++;
  pthread_mutex_unlock(&g_mu);
  if (!s) return;
  s->DestroyInstance(i, a);
  free(s);
}

static int has_pci_ext(struct inst *s, VkPhysicalDevice pd) {
  uint32_t n = 0;
  if (s->EnumerateDeviceExtensionProperties(pd, NULL, &n, NULL) != VK_SUCCESS || !n) return 0;
  VkExtensionProperties *e = calloc(n, sizeof *e);
  int found = 0;
  if (e && s->EnumerateDeviceExtensionProperties(pd, NULL, &n, e) == VK_SUCCESS)
    for (uint32_t k = 0; k < n; k++)
      if (!strcmp(e[k].extensionName, VK_EXT_PCI_BUS_INFO_EXTENSION_NAME)) found = 1;
  free(e);
  return found;
}

/* Fills props; returns 1 if pci was filled. */
static int describe(struct inst *s, VkPhysicalDevice pd, VkPhysicalDeviceProperties *props,
                    VkPhysicalDevicePCIBusInfoPropertiesEXT *pci) {
  s->GetPhysicalDeviceProperties(pd, props);
  if (!s->GetPhysicalDeviceProperties2 || props->apiVersion < VK_API_VERSION_1_1 ||
      !has_pci_ext(s, pd))
    return 0;
  memset(pci, 0, sizeof *pci);
  pci->sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PCI_BUS_INFO_PROPERTIES_EXT;
  VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = pci};
  s->GetPhysicalDeviceProperties2(pd, &p2);
  return 1;
}

/* Index of the chosen device in all[0..n), -1 for none, -2 for "pass everything". */
static int choose(struct inst *s, VkPhysicalDevice *all, uint32_t n) {
  int pick = -2;
  if (s->has_pci) pick = -1;
  else if (s->index >= 0) pick = s->index < (int)n ? s->index : -1;
  for (uint32_t k = 0; k < n; k++) {
    VkPhysicalDeviceProperties p;
    VkPhysicalDevicePCIBusInfoPropertiesEXT pci;
    int hp = describe(s, all[k], &p, &pci);
    if (s->has_pci && hp && pci.pciDomain == s->pci[0] && pci.pciBus == s->pci[1] &&
        pci.pciDevice == s->pci[2] && pci.pciFunction == s->pci[3] && pick == -1)
      pick = (int)k;
    if (s->debug) {
      fprintf(stderr, "[devsel]   %u: %04x:%04x \"%s\" type=%d handle=%p", k, p.vendorID, p.deviceID,
              p.deviceName, (int)p.deviceType, (void *)all[k]);
      if (hp)
        fprintf(stderr, " pci=%04x:%02x:%02x.%x", pci.pciDomain, pci.pciBus, pci.pciDevice,
                pci.pciFunction);
      fprintf(stderr, "\n");
    }
  }
  if (s->debug) {
    if (pick == -2) fprintf(stderr, "[devsel]   no selector: passing all %u\n", n);
    else if (pick == -1) fprintf(stderr, "[devsel]   selector matched nothing: exposing 0\n");
    else fprintf(stderr, "[devsel]   exposing only %d\n", pick);
  }
  return pick;
}

static void record_tags(struct inst *s, VkPhysicalDevice *all, uint32_t n) {
  pthread_mutex_lock(&g_mu);
  for (uint32_t k = 0; k < n; k++) {
    int j = 0;
    while (j < g_ntags && g_tags[j].pd != all[k]) j++;
    if (j == g_ntags) {
      if (g_ntags == (int)(sizeof g_tags / sizeof g_tags[0])) break;
      g_ntags++;
    }
    g_tags[j].pd = all[k];
    g_tags[j].s = s;
    g_tags[j].idx = (int)k;
  }
  pthread_mutex_unlock(&g_mu);
}

static struct tagent *tag_of(VkPhysicalDevice pd) {
  struct tagent *t = NULL;
  pthread_mutex_lock(&g_mu);
  for (int j = 0; j < g_ntags; j++)
    if (g_tags[j].pd == pd) t = &g_tags[j];
  pthread_mutex_unlock(&g_mu);
  return t;
}

static void add_tag(char *name, int idx) {
  char suffix[16];
  snprintf(suffix, sizeof suffix, " [vk%d]", idx);
  size_t l = strnlen(name, VK_MAX_PHYSICAL_DEVICE_NAME_SIZE - 1);
  if (l + strlen(suffix) < VK_MAX_PHYSICAL_DEVICE_NAME_SIZE) memcpy(name + l, suffix, strlen(suffix) + 1);
}

static VKAPI_ATTR void VKAPI_CALL ds_GetPhysicalDeviceProperties(VkPhysicalDevice pd, VkPhysicalDeviceProperties *p) {
  struct tagent *t = tag_of(pd);
  if (!t) { /* not enumerated through us (groups only): untagged */
    pthread_mutex_lock(&g_mu); struct inst *s = g_list; pthread_mutex_unlock(&g_mu);
    if (s) s->GetPhysicalDeviceProperties(pd, p);
    return;
  }
  t->s->GetPhysicalDeviceProperties(pd, p);
  add_tag(p->deviceName, t->idx);
}

static VKAPI_ATTR void VKAPI_CALL ds_GetPhysicalDeviceProperties2(VkPhysicalDevice pd, VkPhysicalDeviceProperties2 *p) {
  struct tagent *t = tag_of(pd);
  struct inst *s = t ? t->s : NULL;
  if (!s) { pthread_mutex_lock(&g_mu); s = g_list; pthread_mutex_unlock(&g_mu); }
  if (!s) return;
  PFN_vkGetPhysicalDeviceProperties2 f = s->GetPhysicalDeviceProperties2 ? s->GetPhysicalDeviceProperties2 : s->GetPhysicalDeviceProperties2KHR;
  f(pd, p);
  if (t) add_tag(p->properties.deviceName, t->idx);
}

static VkResult get_all(struct inst *s, VkInstance i, VkPhysicalDevice **all, uint32_t *n) {
  *all = NULL;
  *n = 0;
  VkResult r = s->EnumeratePhysicalDevices(i, n, NULL);
  if (r != VK_SUCCESS || !*n) return r;
  *all = calloc(*n, sizeof **all);
  if (!*all) return VK_ERROR_OUT_OF_HOST_MEMORY;
  r = s->EnumeratePhysicalDevices(i, n, *all);
  if (r == VK_INCOMPLETE) r = VK_SUCCESS;
  if (r == VK_SUCCESS && s->tag) record_tags(s, *all, *n);
  return r;
}

static VKAPI_ATTR VkResult VKAPI_CALL ds_EnumeratePhysicalDevices(VkInstance i, uint32_t *count,
                                                                  VkPhysicalDevice *out) {
  struct inst *s = find(i);
  if (!s) return VK_ERROR_INITIALIZATION_FAILED;
  if (!s->has_pci && s->index < 0 && !s->tag) return s->EnumeratePhysicalDevices(i, count, out);
  VkPhysicalDevice *all;
  uint32_t n;
  VkResult r = get_all(s, i, &all, &n);
  if (r != VK_SUCCESS) { free(all); return r; }
  int pick = choose(s, all, n);
  if (pick == -2) { /* tag-only mode: pass all through */
    if (!out) *count = n;
    else {
      uint32_t m = *count < n ? *count : n;
      memcpy(out, all, m * sizeof *out);
      r = m < n ? VK_INCOMPLETE : VK_SUCCESS;
      *count = m;
    }
    free(all);
    return r;
  }
  uint32_t avail = pick >= 0 ? 1 : 0;
  if (!out) {
    *count = avail;
  } else {
    r = (*count < avail) ? VK_INCOMPLETE : VK_SUCCESS;
    if (avail && *count) out[0] = all[pick];
    *count = (*count < avail) ? *count : avail;
  }
  free(all);
  return r;
}

static VKAPI_ATTR VkResult VKAPI_CALL ds_EnumeratePhysicalDeviceGroups(
    VkInstance i, uint32_t *count, VkPhysicalDeviceGroupProperties *out) {
  struct inst *s = find(i);
  if (!s || !s->EnumeratePhysicalDeviceGroups) return VK_ERROR_INITIALIZATION_FAILED;
  if (!s->has_pci && s->index < 0) {
    if (s->tag) { VkPhysicalDevice *all; uint32_t n; get_all(s, i, &all, &n); free(all); }
    return s->EnumeratePhysicalDeviceGroups(i, count, out);
  }
  VkPhysicalDevice *all;
  uint32_t n;
  VkResult r = get_all(s, i, &all, &n);
  if (r != VK_SUCCESS) { free(all); return r; }
  int pick = choose(s, all, n);
  VkPhysicalDevice chosen = pick >= 0 ? all[pick] : VK_NULL_HANDLE;
  free(all);
  uint32_t g = 0;
  r = s->EnumeratePhysicalDeviceGroups(i, &g, NULL);
  if (r != VK_SUCCESS) return r;
  VkPhysicalDeviceGroupProperties *groups = calloc(g ? g : 1, sizeof *groups);
  if (!groups) return VK_ERROR_OUT_OF_HOST_MEMORY;
  for (uint32_t k = 0; k < g; k++) groups[k].sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_GROUP_PROPERTIES;
  r = s->EnumeratePhysicalDeviceGroups(i, &g, groups);
  if (r == VK_INCOMPLETE) r = VK_SUCCESS;
  if (r != VK_SUCCESS) { free(groups); return r; }
  /* Keep the one group holding the chosen device, reduced to that device alone. */
  int found = -1;
  for (uint32_t k = 0; k < g && found < 0; k++)
    for (uint32_t d = 0; d < groups[k].physicalDeviceCount; d++)
      if (groups[k].physicalDevices[d] == chosen) found = (int)k;
  uint32_t avail = found >= 0 ? 1 : 0;
  if (!out) {
    *count = avail;
  } else {
    r = (*count < avail) ? VK_INCOMPLETE : VK_SUCCESS;
    if (avail && *count) {
      out[0].physicalDeviceCount = 1;
      memset(out[0].physicalDevices, 0, sizeof out[0].physicalDevices);
      out[0].physicalDevices[0] = chosen;
      out[0].subsetAllocation = VK_FALSE;
    }
    *count = (*count < avail) ? *count : avail;
  }
  free(groups);
  return r;
}

static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL ds_GetInstanceProcAddr(VkInstance i, const char *name);

static PFN_vkVoidFunction intercept(const char *name, struct inst *s) {
  if (s && s->tag) {
    if (!strcmp(name, "vkGetPhysicalDeviceProperties")) return (PFN_vkVoidFunction)ds_GetPhysicalDeviceProperties;
    if (!strcmp(name, "vkGetPhysicalDeviceProperties2") || !strcmp(name, "vkGetPhysicalDeviceProperties2KHR"))
      return (PFN_vkVoidFunction)ds_GetPhysicalDeviceProperties2;
  }
  if (!strcmp(name, "vkGetInstanceProcAddr")) return (PFN_vkVoidFunction)ds_GetInstanceProcAddr;
  if (!strcmp(name, "vkCreateInstance")) return (PFN_vkVoidFunction)ds_CreateInstance;
  if (!strcmp(name, "vkDestroyInstance")) return (PFN_vkVoidFunction)ds_DestroyInstance;
  if (!strcmp(name, "vkEnumeratePhysicalDevices")) return (PFN_vkVoidFunction)ds_EnumeratePhysicalDevices;
  if (!strcmp(name, "vkEnumeratePhysicalDeviceGroups") ||
      !strcmp(name, "vkEnumeratePhysicalDeviceGroupsKHR"))
    return (PFN_vkVoidFunction)ds_EnumeratePhysicalDeviceGroups;
  return NULL;
}

static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL ds_GetInstanceProcAddr(VkInstance i, const char *name) {
  struct inst *s = i ? find(i) : NULL;
  PFN_vkVoidFunction f = intercept(name, s);
  if (f) return f;
  return s ? s->gipa(i, name) : NULL;
}

EXPORT VKAPI_ATTR VkResult VKAPI_CALL
vkNegotiateLoaderLayerInterfaceVersion(VkNegotiateLayerInterface *v) {
  if (v->loaderLayerInterfaceVersion < 2) return VK_ERROR_INITIALIZATION_FAILED;
  v->loaderLayerInterfaceVersion = 2;
  v->pfnGetInstanceProcAddr = ds_GetInstanceProcAddr;
  v->pfnGetDeviceProcAddr = NULL;
  v->pfnGetPhysicalDeviceProcAddr = NULL;
  return VK_SUCCESS;
}
