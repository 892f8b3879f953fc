#include "plugin/elf_manifest.hpp"

#include <elf.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

namespace gantry {

namespace {

// The bytes of one ELF file with bounds-checked reads.
class ElfFile {
 public:
  explicit ElfFile(std::vector<char> bytes) : b_(std::move(bytes)) {}

  template <class T>
  bool read(uint64_t offset, T& out) const {
    if (offset > b_.size() || sizeof(T) > b_.size() - offset) return false;
    std::memcpy(&out, b_.data() + offset, sizeof(T));
    return true;
  }
  const char* string_at(uint64_t offset) const {
    if (offset >= b_.size()) return nullptr;
    const void* end = std::memchr(b_.data() + offset, 0, b_.size() - offset);
    return end ? b_.data() + offset : nullptr;
  }

 private:
  std::vector<char> b_;
};

// The file offset of virtual address `addr` (n bytes), through the allocated sections.
std::optional<uint64_t> file_offset(const std::vector<Elf64_Shdr>& sections, uint64_t addr, uint64_t n) {
  for (const auto& s : sections)
    if ((s.sh_flags & SHF_ALLOC) && s.sh_type != SHT_NOBITS && addr >= s.sh_addr && addr - s.sh_addr <= s.sh_size &&
        n <= s.sh_size - (addr - s.sh_addr))
      return s.sh_offset + (addr - s.sh_addr);
  return std::nullopt;
}

}  // namespace

namespace {

std::optional<gantry_manifest_v1> manifest_of(const ElfFile& f, const std::vector<Elf64_Shdr>& sections) {
  // The exported symbol: Boost.DLL's alias, a pointer to the manifest.
  std::optional<uint64_t> alias;
  for (const auto& s : sections) {
    if (s.sh_type != SHT_DYNSYM || s.sh_link >= sections.size()) continue;
    const Elf64_Shdr& names = sections[s.sh_link];
    for (uint64_t off = 0; off + sizeof(Elf64_Sym) <= s.sh_size && !alias; off += sizeof(Elf64_Sym)) {
      Elf64_Sym sym{};
      if (!f.read(s.sh_offset + off, sym) || sym.st_shndx == SHN_UNDEF) continue;
      const char* name = f.string_at(names.sh_offset + sym.st_name);
      if (name && std::strcmp(name, "gantry_manifest") == 0) alias = sym.st_value;
    }
  }
  if (!alias) return std::nullopt;
  // Where it points: a relative relocation's addend in a shared object, else the stored value.
  std::optional<uint64_t> target;
  for (const auto& s : sections) {
    if (s.sh_type != SHT_RELA) continue;
    for (uint64_t off = 0; off + sizeof(Elf64_Rela) <= s.sh_size && !target; off += sizeof(Elf64_Rela)) {
      Elf64_Rela r{};
      if (f.read(s.sh_offset + off, r) && r.r_offset == *alias && ELF64_R_TYPE(r.r_info) == R_X86_64_RELATIVE)
        target = static_cast<uint64_t>(r.r_addend);
    }
  }
  if (!target) {
    uint64_t stored = 0;
    const auto at = file_offset(sections, *alias, sizeof stored);
    if (!at || !f.read(*at, stored) || stored == 0) return std::nullopt;
    target = stored;
  }
  const auto at = file_offset(sections, *target, sizeof(gantry_manifest_v1));
  gantry_manifest_v1 m{};
  if (!at || !f.read(*at, m)) return std::nullopt;
  m.name = m.version = m.description = nullptr;  // addresses in the file, not in this process
  return m;
}

std::vector<std::string> needed_of(const ElfFile& f, const std::vector<Elf64_Shdr>& sections) {
  std::vector<std::string> out;
  for (const auto& s : sections) {
    if (s.sh_type != SHT_DYNAMIC || s.sh_link >= sections.size()) continue;
    const Elf64_Shdr& names = sections[s.sh_link];
    for (uint64_t off = 0; off + sizeof(Elf64_Dyn) <= s.sh_size; off += sizeof(Elf64_Dyn)) {
      Elf64_Dyn d{};
      if (!f.read(s.sh_offset + off, d) || d.d_tag == DT_NULL) break;
      if (d.d_tag != DT_NEEDED) continue;
      if (const char* name = f.string_at(names.sh_offset + d.d_un.d_val)) out.emplace_back(name);
    }
  }
  return out;
}

}  // namespace

namespace {

std::string machine_name(unsigned machine) {
  switch (machine) {
    case EM_X86_64:
      return "x86-64";
    case EM_AARCH64:
      return "aarch64";
    case EM_386:
      return "i386";
    case EM_ARM:
      return "32-bit ARM";
    case EM_PPC64:
      return "ppc64";
    case EM_RISCV:
      return "riscv";
    case EM_S390:
      return "s390";
    default:
      return "machine " + std::to_string(machine);
  }
}

#if defined(__x86_64__)
constexpr unsigned kHostMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr unsigned kHostMachine = EM_AARCH64;
#else
constexpr unsigned kHostMachine = EM_NONE;
#endif

}  // namespace

std::string elf_of_another_machine(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char h[20] = {};
  if (!in.read(reinterpret_cast<char*>(h), sizeof h) || std::memcmp(h, ELFMAG, SELFMAG) != 0) return "";
  const bool little = h[EI_DATA] == ELFDATA2LSB;
  const unsigned machine = little ? unsigned(h[18]) | unsigned(h[19]) << 8 : unsigned(h[19]) | unsigned(h[18]) << 8;
  const std::string bits = h[EI_CLASS] == ELFCLASS64 ? "64-bit" : h[EI_CLASS] == ELFCLASS32 ? "32-bit" : "?-bit";
  if (kHostMachine == EM_NONE) return "";
  if (machine != kHostMachine)
    return "an ELF for " + machine_name(machine) + " (" + bits + "), this gantry runs on " + machine_name(kHostMachine);
  if (h[EI_CLASS] != ELFCLASS64 || !little)
    return "a " + bits + (little ? "" : " big-endian") + " ELF, this gantry is a 64-bit little-endian program";
  return "";
}

std::optional<ElfPlugin> read_plugin_elf(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  ElfFile f(std::vector<char>(std::istreambuf_iterator<char>(in), {}));
  Elf64_Ehdr eh{};
  if (!f.read(0, eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_ident[EI_DATA] != ELFDATA2LSB || eh.e_machine != EM_X86_64 || eh.e_shentsize != sizeof(Elf64_Shdr))
    return std::nullopt;
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  for (size_t i = 0; i < sections.size(); ++i)
    if (!f.read(eh.e_shoff + i * sizeof(Elf64_Shdr), sections[i])) return std::nullopt;
  return ElfPlugin{manifest_of(f, sections), needed_of(f, sections)};
}

}  // namespace gantry
