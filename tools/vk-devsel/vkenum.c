/* Lists what vkEnumeratePhysicalDevices returns (order, handle, name, PCI address, deviceUUID). */
#include <vulkan/vulkan.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
int main(void) {
  void *lib = dlopen("libvulkan.so.1", RTLD_NOW);
  if (!lib) { fprintf(stderr, "no libvulkan.so.1: %s\n", dlerror()); return 1; }
  PFN_vkGetInstanceProcAddr gipa = (PFN_vkGetInstanceProcAddr)dlsym(lib, "vkGetInstanceProcAddr");
  PFN_vkCreateInstance ci = (PFN_vkCreateInstance)gipa(NULL, "vkCreateInstance");
  VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .apiVersion = VK_API_VERSION_1_1};
  VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
  VkInstance inst;
  VkResult r = ci(&ici, NULL, &inst);
  if (r) { fprintf(stderr, "vkCreateInstance %d\n", r); return 1; }
  PFN_vkEnumeratePhysicalDevices epd = (PFN_vkEnumeratePhysicalDevices)gipa(inst, "vkEnumeratePhysicalDevices");
  PFN_vkGetPhysicalDeviceProperties2 gp2 = (PFN_vkGetPhysicalDeviceProperties2)gipa(inst, "vkGetPhysicalDeviceProperties2");
  PFN_vkEnumerateDeviceExtensionProperties ede = (PFN_vkEnumerateDeviceExtensionProperties)gipa(inst, "vkEnumerateDeviceExtensionProperties");
  uint32_t n = 16; VkPhysicalDevice pd[16];
  r = epd(inst, &n, pd);
  printf("vkEnumeratePhysicalDevices -> %d, count %u\n", r, n);
  for (uint32_t i = 0; i < n; i++) {
    VkExtensionProperties ex[512]; uint32_t ne = 512; int pci = 0;
    ede(pd[i], NULL, &ne, ex);
    for (uint32_t k = 0; k < ne; k++) if (!strcmp(ex[k].extensionName, VK_EXT_PCI_BUS_INFO_EXTENSION_NAME)) pci = 1;
    VkPhysicalDevicePCIBusInfoPropertiesEXT pb = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PCI_BUS_INFO_PROPERTIES_EXT};
    VkPhysicalDeviceIDProperties id = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES, .pNext = pci ? &pb : NULL};
    VkPhysicalDeviceProperties2 p = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &id};
    gp2(pd[i], &p);
    printf("  %u: handle=%p %04x:%04x \"%s\" type=%d", i, (void *)pd[i], p.properties.vendorID, p.properties.deviceID, p.properties.deviceName, p.properties.deviceType);
    if (pci) printf(" pci=%04x:%02x:%02x.%x", pb.pciDomain, pb.pciBus, pb.pciDevice, pb.pciFunction);
    printf(" uuid=");
    for (int k = 0; k < 16; k++) printf("%02x%s", id.deviceUUID[k], (k == 3 || k == 5 || k == 7 || k == 9) ? "-" : "");
    printf("\n");
  }
  return 0;
}
